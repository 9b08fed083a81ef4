/* A range's plain pulls on a connection of its own, in one call: client/direct.py's
 * DirectPuller.fast_range, the compiled form of what sidecar/pull.py does pull by pull.
 *
 * run(fd, head, mid, tail, start, end, stride, depth, max_rows, max_bytes, timeout_ms, opaque)
 *     -> (data, resume, opaque, rest, starts)
 *
 * Sends JSON PULL_MESSAGE requests made from the template (head + offset + mid + opaque +
 * tail, as direct.py cuts it) for offsets start, start + stride, ... while each whole pull
 * fits below end, up to `depth` in flight, until about `max_rows` messages were asked for or
 * `max_bytes` of bodies came (whichever first: memory stays bounded); reads the
 * answers (matched by opaque: a broker may answer out of order) and returns the FOUND
 * bodies, in offset order, that ended where they were expected to (at + stride). The
 * answers are read straight into `data` and stay where they arrived: `starts` says where
 * each stored record of the delivered bodies starts in it, in offset order (native int32
 * positions, noted as each body is delivered, while it is in cache); frame headers and
 * answers not delivered lie between them. The first answer that is anything else
 * (another status, a short answer, a header this scanner does not read) stops it: no more
 * requests go out, the answers still due are read and dropped, and `resume` is where the
 * caller's own (Python) path goes on: past a short FOUND answer (its body is returned),
 * else at that pull's offset. `opaque` is the last one used, `rest` what was read past the
 * last answer due (the start of a frame nobody asked for). When a record's size does not
 * fit its body, `starts` is None and `data` the delivered bodies joined, one after the
 * other (stored records delimit themselves), for the caller's decoder to walk and report.
 * Raises TimeoutError when no answer comes for timeout_ms, ConnectionError when the
 * connection fails or closes, ValueError on a frame with a bad length: the connection is
 * then out of step and the caller must drop it. The whole run goes without the GIL (a
 * thread decoding the last run's bodies meanwhile is not made to hand it over per pull).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_FRAME (16 * 1024 * 1024)
#define RECV_CHUNK (256 * 1024)
#define RECV_LEAST (64 * 1024)   /* room below which the run's bytes grow before a read */
#define MAX_DEPTH 64

typedef struct {
    long long at;
    long opaque;
    int state;            /* 0 waiting, 1 answered */
    long long code, next; /* code -1: an answer this scanner could not read */
    int has_body;         /* a FOUND answer's body, taken: at pos in the run's bytes, len long */
    size_t pos, len;
} Slot;

typedef struct {
    const char *p, *end;
} Cur;

/* ------------------------------------------------------------------ a small JSON scanner */

static void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static int skip_string(Cur *c) {          /* at '"' */
    c->p++;
    while (c->p < c->end) {
        char ch = *c->p++;
        if (ch == '\\') {
            if (c->p >= c->end)
                return -1;
            c->p++;
        } else if (ch == '"') {
            return 0;
        }
    }
    return -1;
}

static int skip_value(Cur *c) {
    ws(c);
    if (c->p >= c->end)
        return -1;
    char ch = *c->p;
    if (ch == '"')
        return skip_string(c);
    if (ch == '{' || ch == '[') {
        int depth = 0;
        while (c->p < c->end) {
            ch = *c->p;
            if (ch == '"') {
                if (skip_string(c))
                    return -1;
                continue;
            }
            if (ch == '{' || ch == '[')
                depth++;
            else if (ch == '}' || ch == ']') {
                if (--depth == 0) {
                    c->p++;
                    return 0;
                }
            }
            c->p++;
        }
        return -1;
    }
    const char *from = c->p;
    while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']' && *c->p != ' ' &&
           *c->p != '\n' && *c->p != '\r' && *c->p != '\t')
        c->p++;
    return c->p > from ? 0 : -1;
}

/* An integer, bare or as a string of digits (extFields values are strings). */
static int read_int(Cur *c, long long *out) {
    ws(c);
    int quoted = 0, neg = 0, digits = 0;
    long long v = 0;
    if (c->p < c->end && *c->p == '"') {
        quoted = 1;
        c->p++;
    }
    if (c->p < c->end && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (++digits > 18)
            return -1;
        v = v * 10 + (*c->p - '0');
        c->p++;
    }
    if (!digits)
        return -1;
    if (quoted) {
        if (c->p >= c->end || *c->p != '"')
            return -1;
        c->p++;
    } else if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) {
        return -1;
    }
    *out = neg ? -v : v;
    return 0;
}

/* The next key of an object (no escapes in it), and the ':' after it. */
static int read_key(Cur *c, const char **key, size_t *len) {
    ws(c);
    if (c->p >= c->end || *c->p != '"')
        return -1;
    const char *from = ++c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\')
            return -1;
        c->p++;
    }
    if (c->p >= c->end)
        return -1;
    *key = from;
    *len = (size_t)(c->p - from);
    c->p++;
    ws(c);
    if (c->p >= c->end || *c->p != ':')
        return -1;
    c->p++;
    return 0;
}

static int key_is(const char *key, size_t len, const char *name) {
    return strlen(name) == len && memcmp(key, name, len) == 0;
}

/* After a member: ',' (1: another follows) or '}' (0: the object ended). */
static int after_member(Cur *c) {
    ws(c);
    if (c->p < c->end && *c->p == ',') {
        c->p++;
        return 1;
    }
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    return -1;
}

static int scan_ext(Cur *c, long long *next) {
    ws(c);
    if (c->p >= c->end || *c->p != '{')
        return -1;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        const char *key;
        size_t len;
        if (read_key(c, &key, &len))
            return -1;
        if (key_is(key, len, "nextBeginOffset")) {
            if (read_int(c, next))
                return -1;
        } else if (skip_value(c)) {
            return -1;
        }
        int more = after_member(c);
        if (more < 0)
            return -1;
        if (!more)
            return 0;
    }
}

/* code, flag, opaque and extFields.nextBeginOffset of a JSON header; -1 if unreadable. */
static int scan_header(const char *p, size_t n, long long *code, long long *flag, long long *opaque,
                       long long *next) {
    Cur c = {p, p + n};
    int seen = 0;
    *next = -1;
    ws(&c);
    if (c.p >= c.end || *c.p != '{')
        return -1;
    c.p++;
    for (;;) {
        const char *key;
        size_t len;
        if (read_key(&c, &key, &len))
            return -1;
        if (key_is(key, len, "code")) {
            if (read_int(&c, code))
                return -1;
            seen |= 1;
        } else if (key_is(key, len, "flag")) {
            if (read_int(&c, flag))
                return -1;
            seen |= 2;
        } else if (key_is(key, len, "opaque")) {
            if (read_int(&c, opaque))
                return -1;
            seen |= 4;
        } else if (key_is(key, len, "extFields")) {
            ws(&c);
            if (c.p + 4 <= c.end && memcmp(c.p, "null", 4) == 0)
                c.p += 4;
            else if (scan_ext(&c, next))
                return -1;
        } else if (skip_value(&c)) {
            return -1;
        }
        int more = after_member(&c);
        if (more < 0)
            return -1;
        if (!more)
            break;
    }
    return seen == 7 ? 0 : -1;
}

/* The decimal digits of v at out (no sign: offsets and opaques are not negative); returns
   the end. sprintf's "%lld" cost more than the rest of building a request. */
static char *put_decimal(char *out, unsigned long long v) {
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *out++ = digits[--n];
    return out;
}

/* ------------------------------------------------------------------ I/O */

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What went wrong, kept while the GIL is released and raised once it is held again. */
typedef struct {
    int kind;            /* 0 none, or one of E_* */
    int err;             /* errno for E_ERRNO */
    char text[96];
} Fail;
enum { E_NONE, E_TIMEOUT, E_CLOSED, E_ERRNO, E_FRAME, E_MEMORY, E_ARGS };

static int fail(Fail *f, int kind, const char *text) {
    f->kind = kind;
    f->err = errno;
    snprintf(f->text, sizeof f->text, "%s", text ? text : "");
    return -1;
}

static void raise_fail(const Fail *f) {
    switch (f->kind) {
    case E_TIMEOUT: PyErr_SetString(PyExc_TimeoutError, f->text); break;
    case E_CLOSED: PyErr_SetString(PyExc_ConnectionError, f->text); break;
    case E_ERRNO: errno = f->err; PyErr_SetFromErrno(PyExc_ConnectionError); break;
    case E_FRAME: case E_ARGS: PyErr_SetString(PyExc_ValueError, f->text); break;
    default: PyErr_NoMemory(); break;
    }
}

/* 0 ready, -1 failed (timed out or poll's error). Called without the GIL. */
static int wait_for(int fd, short events, long long deadline, const char *timed_out, Fail *f) {
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return fail(f, E_TIMEOUT, timed_out);
        struct pollfd pfd = {fd, events, 0};
        int r = poll(&pfd, 1, (int)(left > 60000 ? 60000 : left));
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return fail(f, E_ERRNO, NULL);
    }
}

static int send_all(int fd, const char *data, size_t len, long long timeout_ms, Fail *f) {
    long long deadline = now_ms() + timeout_ms;
    while (len) {
        ssize_t n = send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_for(fd, POLLOUT, deadline, "sending pulls timed out", f))
                return -1;
            continue;
        }
        return fail(f, E_ERRNO, NULL);
    }
    return 0;
}

/* Everything a run reads, in one bytes object handed back as it is: answers are read
   straight into it and stay where they arrived, so no body is copied after the socket's
   own copy. The records of the delivered bodies are noted, in offset order, as where they
   start in it (walked as each body is delivered, while it is in cache); the frames'
   headers, answers dropped and bodies delivered later lie between them. Growing the bytes
   object takes the GIL for the moment of the resize. */
typedef struct {
    PyObject *obj;
    size_t start, len, cap;  /* unread bytes: obj[start:start + len]; obj's size: cap */
    PyThreadState **ts;      /* the run's saved thread state */
    int32_t *starts;         /* record positions in obj (raw allocator) */
    size_t nstarts, starts_cap;
    size_t (*bodies)[2];     /* each delivered body's position and length, in order */
    size_t nbodies, bodies_cap, body_bytes;
    int unwalked;            /* a body's sizes did not add up: the bodies go back joined, unwalked */
    int sized;               /* grown once to the run's expected size */
    long long pulls;         /* pulls the run is expected to deliver */
    size_t limit;            /* max_bytes: the run stops past it */
} Run;

static inline char *run_data(const Run *r) { return PyBytes_AS_STRING(r->obj); }

/* obj grown to at least `size` bytes (doubling); 0, or -1 out of memory. */
static int run_grow(Run *r, size_t size, Fail *f) {
    if (size <= r->cap)
        return 0;
    size_t cap = r->cap * 2 > size ? r->cap * 2 : size;
    PyEval_RestoreThread(*r->ts);
    int bad = _PyBytes_Resize(&r->obj, (Py_ssize_t)cap) < 0;
    if (bad)
        PyErr_Clear();       /* reported as E_MEMORY below */
    *r->ts = PyEval_SaveThread();
    if (bad)
        return fail(f, E_MEMORY, NULL);
    r->cap = cap;
    return 0;
}

/* Notes where the records of the body at obj[base:base + len] start. A size that does not
   fit marks the run unwalked: the caller's decoder then walks the joined bodies and reports
   it. 0, or -1 out of memory. */
static int run_walk(Run *r, size_t base, size_t len, Fail *f) {
    const unsigned char *p = (const unsigned char *)run_data(r) + base;
    size_t pos = 0;
    while (!r->unwalked && pos < len) {
        if (len - pos < 4 || base + pos > INT32_MAX) {
            r->unwalked = 1;
            break;
        }
        size_t size = ((size_t)p[pos] << 24) | ((size_t)p[pos + 1] << 16) | ((size_t)p[pos + 2] << 8) | p[pos + 3];
        if (size < 4 || size > len - pos) {
            r->unwalked = 1;
            break;
        }
        if (r->nstarts == r->starts_cap) {
            size_t cap = r->starts_cap ? r->starts_cap * 2 : 4096;
            int32_t *grown = PyMem_RawRealloc(r->starts, cap * sizeof *grown);
            if (!grown)
                return fail(f, E_MEMORY, NULL);
            r->starts = grown;
            r->starts_cap = cap;
        }
        r->starts[r->nstarts++] = (int32_t)(base + pos);
        pos += size;
    }
    return 0;
}

/* Delivers an answered pull's body (it is the next in offset order, and stays where it
   was read); a short answer (it did not end at at + stride) ends the run there. 0, or -1
   failed. */
static int deliver(Run *r, const Slot *s, long long stride, long long *resume, int *stopping, Fail *f) {
    if (r->nbodies == r->bodies_cap) {
        size_t cap = r->bodies_cap ? r->bodies_cap * 2 : 64;
        size_t (*grown)[2] = PyMem_RawRealloc(r->bodies, cap * sizeof *grown);
        if (!grown)
            return fail(f, E_MEMORY, NULL);
        r->bodies = grown;
        r->bodies_cap = cap;
    }
    r->bodies[r->nbodies][0] = s->pos;
    r->bodies[r->nbodies][1] = s->len;
    r->nbodies++;
    r->body_bytes += s->len;
    if (run_walk(r, s->pos, s->len, f))
        return -1;
    if (s->next != s->at + stride) {
        *resume = s->next;
        *stopping = 1;
    }
    return 0;
}

/* Once the first answer with a body is in (`frame` bytes): obj grown at once to what the
   run's pulls should need (pulls of one stride are alike), so it does not grow by doubling,
   each growth copying all read so far. 0, or -1 out of memory. */
static int run_size(Run *r, size_t frame, Fail *f) {
    r->sized = 1;
    if (r->pulls <= 1)
        return 0;
    size_t expect = frame + frame / 8;
    if ((size_t)r->pulls <= (SIZE_MAX / 2) / expect)
        expect *= (size_t)r->pulls;
    if (r->limit && expect > r->limit + frame)
        expect = r->limit + frame;
    return run_grow(r, r->start + r->len + expect, f);
}

/* Reads once more into obj, after what is there (grown only when little room is left: the
   run's expected size leaves some to spare); 0 read, -1 failed. Called without the GIL. */
static int fill(int fd, Run *r, long long deadline, Fail *f) {
    if (r->cap - (r->start + r->len) < RECV_LEAST && run_grow(r, r->start + r->len + RECV_CHUNK, f))
        return -1;
    for (;;) {
        size_t room = r->cap - r->start - r->len;
        ssize_t n = recv(fd, run_data(r) + r->start + r->len, room < RECV_CHUNK ? room : RECV_CHUNK, MSG_DONTWAIT);
        if (n > 0) {
            r->len += (size_t)n;
            return 0;
        }
        if (n == 0)
            return fail(f, E_CLOSED, "connection closed by the peer");
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail(f, E_ERRNO, NULL);
        if (wait_for(fd, POLLIN, deadline, "no pull answer in time", f))
            return -1;
    }
}

/* The data handed back: obj itself cut after the last frame taken (the bodies and the bytes
   between them), empty when no body came, or the bodies joined (unwalked: the decoder
   walks them). New reference, or NULL with an exception set. */
static PyObject *run_result(Run *r) {
    if (r->body_bytes == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    if (!r->unwalked) {
        if (_PyBytes_Resize(&r->obj, (Py_ssize_t)r->start) < 0)
            return NULL;
        PyObject *data = r->obj;
        r->obj = NULL;
        return data;
    }
    PyObject *joined = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)r->body_bytes);
    if (!joined)
        return NULL;
    char *out = PyBytes_AS_STRING(joined);
    for (size_t i = 0; i < r->nbodies; i++) {
        memcpy(out, run_data(r) + r->bodies[i][0], r->bodies[i][1]);
        out += r->bodies[i][1];
    }
    return joined;
}

/* ------------------------------------------------------------------ the run */

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    int fd, depth;
    Py_buffer head, mid, tail;
    long long start, end, stride, max_rows, max_bytes, timeout_ms;
    long opaque;
    if (!PyArg_ParseTuple(args, "iy*y*y*LLLiLLLl", &fd, &head, &mid, &tail, &start, &end, &stride,
                          &depth, &max_rows, &max_bytes, &timeout_ms, &opaque))
        return NULL;
    PyObject *result = NULL;
    char *frames = NULL;
    PyThreadState *ts = NULL;
    Run r;                                                      /* everything read */
    memset(&r, 0, sizeof r);
    r.ts = &ts;
    Slot slots[MAX_DEPTH];
    int first = 0, count = 0;         /* in-flight slots: a ring from `first` */
    long long ahead = start, planned = 0, resume = -1, due = 0, got_bytes = 0;
    int stopping = 0;
    Fail f = {E_NONE, 0, {0}};
    memset(slots, 0, sizeof slots);
    if (depth < 1 || depth > MAX_DEPTH || stride < 1 || start < 0 || opaque < 0) {
        PyErr_SetString(PyExc_ValueError, "bad depth, stride, start or opaque");
        goto release;
    }
    size_t frame_cap = (size_t)depth * (8 + head.len + mid.len + tail.len + 48);
    r.cap = RECV_CHUNK;
    {
        long long span = end - start < max_rows ? end - start : max_rows;
        r.pulls = span > 0 ? (span + stride - 1) / stride : 0;
        r.limit = max_bytes > 0 ? (size_t)max_bytes : 0;
    }
    if (!(r.obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)r.cap)))
        goto release;
    ts = PyEval_SaveThread();                       /* the whole run goes without the GIL */
    frames = PyMem_RawMalloc(frame_cap);
    if (!frames) {
        fail(&f, E_MEMORY, NULL);
        goto done;
    }
    for (;;) {
        /* deliver answered pulls in offset order */
        while (count && slots[first].state && !stopping) {
            Slot *s = &slots[first];
            if (s->code == 0 && s->has_body && s->next > s->at) {
                if (deliver(&r, s, stride, &resume, &stopping, &f))
                    goto done;
            } else {                                     /* the caller's path */
                resume = s->at;
                stopping = 1;
            }
            first = (first + 1) % depth;
            count--;
        }
        /* requests: whole pulls below end, up to depth in flight and about max_rows in all,
           sent once half the pipeline is free (or it ran dry): one write, and one wake-up of
           the broker, for several pulls instead of one each */
        size_t flen = 0;
        int refill = count == 0 || depth - count >= (depth + 1) / 2;
        while (refill && !stopping && count < depth && ahead + stride <= end && planned < max_rows &&
               got_bytes < max_bytes) {
            opaque = (opaque % 0x7FFFFFFE) + 1;
            char *fr = frames + flen;
            char *h = fr + 8;
            memcpy(h, head.buf, head.len);
            h += head.len;
            h = put_decimal(h, (unsigned long long)ahead);
            memcpy(h, mid.buf, mid.len);
            h += mid.len;
            h = put_decimal(h, (unsigned long long)opaque);
            memcpy(h, tail.buf, tail.len);
            h += tail.len;
            uint32_t hlen = (uint32_t)(h - (fr + 8)), total = hlen + 4;
            fr[0] = (char)(total >> 24); fr[1] = (char)(total >> 16); fr[2] = (char)(total >> 8); fr[3] = (char)total;
            fr[4] = 0; fr[5] = (char)(hlen >> 16); fr[6] = (char)(hlen >> 8); fr[7] = (char)hlen;  /* JSON */
            flen += (size_t)(h - fr);
            Slot *s = &slots[(first + count) % depth];
            s->at = ahead;
            s->opaque = opaque;
            s->state = 0;
            s->has_body = 0;
            count++;
            due++;
            ahead += stride;
            planned += stride;
        }
        if (flen && send_all(fd, frames, flen, timeout_ms, &f))
            goto done;
        if (!due) {
            if (!stopping)
                resume = ahead;
            break;
        }
        /* one answer frame (or more bytes of it) */
        for (;;) {
            if (r.len >= 4) {
                unsigned char *q = (unsigned char *)run_data(&r) + r.start;
                long long length = ((long long)q[0] << 24) | (q[1] << 16) | (q[2] << 8) | q[3];
                if (length < 4 || length + 4 > MAX_FRAME) {
                    snprintf(f.text, sizeof f.text, "bad frame length %lld", length);
                    f.kind = E_FRAME;
                    goto done;
                }
                if ((long long)r.len >= length + 4)
                    break;
            }
            if (fill(fd, &r, now_ms() + timeout_ms, &f))
                goto done;
        }
        unsigned char *q = (unsigned char *)run_data(&r) + r.start;
        size_t length = ((size_t)q[0] << 24) | ((size_t)q[1] << 16) | ((size_t)q[2] << 8) | q[3];
        size_t hlen = ((size_t)q[5] << 16) | ((size_t)q[6] << 8) | q[7];
        long long code = -1, flag = 0, op = -1, next = -1;
        int readable = q[4] == 0 && hlen <= length - 4 &&
                       scan_header((const char *)q + 8, hlen, &code, &flag, &op, &next) == 0;
        size_t frame_at = r.start;
        r.start += length + 4;           /* taken: it stays where it is */
        r.len -= length + 4;
        if (readable && !(flag & 1))     /* a request from the broker: not ours */
            continue;
        due--;
        Slot *hit = NULL;
        for (int i = 0; readable && i < count; i++) {
            Slot *s = &slots[(first + i) % depth];
            if (s->opaque == op && !s->state)
                hit = s;
        }
        if (!hit) {
            /* unreadable, or no pull of ours: which pull it answered is unknown, so every
               pull not yet delivered goes to the caller's path */
            if (!stopping) {
                resume = count ? slots[first].at : ahead;
                stopping = 1;
            }
        } else {
            hit->state = 1;
            hit->code = code;
            hit->next = next;
            if (code == 0 && !stopping) {
                hit->pos = frame_at + 8 + hlen;   /* delivered in offset order, from where it is */
                hit->len = length - 4 - hlen;
                hit->has_body = 1;
                got_bytes += (long long)hit->len;
                if (!r.sized && hit->len && run_size(&r, length + 4, &f))
                    goto done;
            }
        }
        if (stopping)            /* what is still due is read and dropped */
            count = 0;
    }
done:
    PyMem_RawFree(frames);
    PyEval_RestoreThread(ts);
    if (f.kind != E_NONE) {
        raise_fail(&f);
    } else {
        /* the bytes read past the last answer due (none from a broker that only answers);
           the delivered bodies (records delimit themselves) and where their records start,
           in order (None when a size did not fit) */
        PyObject *rest = PyBytes_FromStringAndSize(run_data(&r) + r.start, (Py_ssize_t)r.len);
        PyObject *starts = r.unwalked
            ? (Py_INCREF(Py_None), Py_None)
            : PyBytes_FromStringAndSize((const char *)r.starts, (Py_ssize_t)(r.nstarts * sizeof(int32_t)));
        PyObject *data = rest && starts ? run_result(&r) : NULL;
        if (data)
            result = Py_BuildValue("(NLlNN)", data, resume, opaque, rest, starts);
        else {
            Py_XDECREF(rest);
            Py_XDECREF(starts);
        }
    }
    PyMem_RawFree(r.starts);
    PyMem_RawFree(r.bodies);
release:
    Py_XDECREF(r.obj);
    PyBuffer_Release(&head);
    PyBuffer_Release(&mid);
    PyBuffer_Release(&tail);
    return result;
}

/* scan(header) -> (code, flag, opaque, nextBeginOffset or -1), or None: what run reads of
 * an answer's JSON header (tests compare it with json.loads). */
static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer h;
    if (!PyArg_ParseTuple(args, "y*", &h))
        return NULL;
    long long code = -1, flag = 0, opaque = -1, next = -1;
    int bad = scan_header(h.buf, (size_t)h.len, &code, &flag, &opaque, &next);
    PyBuffer_Release(&h);
    if (bad)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLL)", code, flag, opaque, next);
}

static PyMethodDef METHODS[] = {
    {"run", run, METH_VARARGS, "A range's plain pulls in one call: (data, resume, opaque, rest)."},
    {"scan", scan, METH_VARARGS, "(code, flag, opaque, nextBeginOffset) of a JSON header, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_fastpull", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastpull(void) { return PyModule_Create(&MODULE); }
