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
 * bodies, in offset order, that ended where they were expected to (at + stride), one after
 * the other in `data` (stored records delimit themselves). The first
 * answer that is anything else (another status, a short answer, a header this scanner does
 * not read) stops it: no more requests go out, the answers still due are read and dropped,
 * and `resume` is where the caller's own (Python) path goes on: past a short FOUND answer
 * (its body is returned), else at that pull's offset. `opaque` is the last one used, `rest`
 * what was read past the last answer due (the start of a frame nobody asked for),
 * `starts` where each stored record of `data` starts (native int32 positions; walked as
 * each body is copied, while it is in cache), or None when a record's size does not fit.
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
#define MAX_DEPTH 64

typedef struct {
    long long at;
    long opaque;
    int state;            /* 0 waiting, 1 answered */
    long long code, next; /* code -1: an answer this scanner could not read */
    char *body;           /* a FOUND answer's body (raw allocator), len bytes */
    size_t len;
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

typedef struct {
    char *data;
    size_t start, len, cap;   /* unread bytes: data[start:start + len] */
} Buf;

/* Room for `more` bytes after the end of `b` (raw allocator: no GIL needed). */
static int reserve(Buf *b, size_t more, Fail *f) {
    if (b->cap - (b->start + b->len) >= more)
        return 0;
    if (b->start && b->len)
        memmove(b->data, b->data + b->start, b->len);
    b->start = 0;
    if (b->cap - b->len >= more)
        return 0;
    size_t cap = b->cap * 2 > b->len + more ? b->cap * 2 : b->len + more;
    char *grown = PyMem_RawRealloc(b->data, cap);
    if (!grown)
        return fail(f, E_MEMORY, NULL);
    b->data = grown;
    b->cap = cap;
    return 0;
}

/* The delivered bodies, written straight into the bytes object handed back (no copy at
   the end), and where each of their stored records starts in it: walked as a body is
   copied in, while it is in cache, so the decoder need not walk them again from memory.
   Growing the bytes object takes the GIL for the moment of the resize. */
typedef struct {
    PyObject *obj;
    size_t len, cap;
    PyThreadState **ts;   /* the run's saved thread state */
    int32_t *starts;      /* record positions in obj (raw allocator) */
    size_t nstarts, starts_cap;
    int unwalked;         /* a body's sizes did not add up: no starts are handed back */
    long long pulls;      /* pulls the run is expected to deliver */
    size_t limit;         /* max_bytes: the run stops past it */
} Out;

static int out_reserve(Out *o, size_t more, Fail *f) {
    if (o->cap - o->len >= more)
        return 0;
    size_t cap = o->cap * 2 > o->len + more ? o->cap * 2 : o->len + more;
    PyEval_RestoreThread(*o->ts);
    int bad = _PyBytes_Resize(&o->obj, (Py_ssize_t)cap) < 0;
    if (bad)
        PyErr_Clear();       /* reported as E_MEMORY below */
    *o->ts = PyEval_SaveThread();
    if (bad)
        return fail(f, E_MEMORY, NULL);
    o->cap = cap;
    return 0;
}

/* Notes where the records of the body just copied to obj[base:base + len] start. A size
   that does not fit marks the run unwalked: the caller's decoder then walks the data and
   reports it. 0, or -1 out of memory. */
static int out_walk(Out *o, size_t base, size_t len, Fail *f) {
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(o->obj) + base;
    size_t pos = 0;
    while (!o->unwalked && pos < len) {
        if (len - pos < 4 || base + pos > INT32_MAX) {
            o->unwalked = 1;
            break;
        }
        size_t size = ((size_t)p[pos] << 24) | ((size_t)p[pos + 1] << 16) | ((size_t)p[pos + 2] << 8) | p[pos + 3];
        if (size < 4 || size > len - pos) {
            o->unwalked = 1;
            break;
        }
        if (o->nstarts == o->starts_cap) {
            size_t cap = o->starts_cap ? o->starts_cap * 2 : 4096;
            int32_t *grown = PyMem_RawRealloc(o->starts, cap * sizeof *grown);
            if (!grown)
                return fail(f, E_MEMORY, NULL);
            o->starts = grown;
            o->starts_cap = cap;
        }
        o->starts[o->nstarts++] = (int32_t)(base + pos);
        pos += size;
    }
    return 0;
}

/* Appends an answered pull's body (it is the next in offset order); a short answer (it did
   not end at at + stride) ends the run there. 0, or -1 failed. */
static int deliver(Out *o, const Slot *s, const char *body, size_t len, long long stride,
                   long long *resume, int *stopping, Fail *f) {
    if (o->len == 0 && len > 0 && o->pulls > 1) {
        /* the first body: the run's whole size at once (pulls of one stride are alike), so
           the bytes do not grow by doubling: each growth copied all delivered so far */
        size_t expect = len + len / 8;
        if ((size_t)o->pulls <= (SIZE_MAX / 2) / expect)
            expect *= (size_t)o->pulls;
        if (o->limit && expect > o->limit + len)
            expect = o->limit + len;
        if (expect > o->cap && out_reserve(o, expect, f))
            return -1;
    }
    if (out_reserve(o, len, f))
        return -1;
    memcpy(PyBytes_AS_STRING(o->obj) + o->len, body, len);
    if (out_walk(o, o->len, len, f))
        return -1;
    o->len += len;
    if (s->next != s->at + stride) {
        *resume = s->next;
        *stopping = 1;
    }
    return 0;
}

/* Reads once more into the buffer; 0 read, -1 failed. Called without the GIL. */
static int fill(int fd, Buf *b, long long deadline, Fail *f) {
    if (reserve(b, RECV_CHUNK, f))
        return -1;
    for (;;) {
        ssize_t n = recv(fd, b->data + b->start + b->len, b->cap - b->start - b->len, MSG_DONTWAIT);
        if (n > 0) {
            b->len += (size_t)n;
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
    Buf in = {NULL, 0, 0, 0};                           /* read, not yet taken */
    PyThreadState *ts = NULL;
    Out out = {NULL, 0, 0, &ts, NULL, 0, 0, 0, 0, 0};    /* the bodies delivered */
    Slot slots[MAX_DEPTH];
    int first = 0, count = 0;         /* in-flight slots: a ring from `first` */
    long long ahead = start, planned = 0, resume = -1, due = 0, got_bytes = 0;
    int stopping = 0;
    Fail f = {E_NONE, 0, {0}};
    memset(slots, 0, sizeof slots);
    if (depth < 1 || depth > MAX_DEPTH || stride < 1 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "bad depth, stride or start");
        goto release;
    }
    size_t frame_cap = (size_t)depth * (8 + head.len + mid.len + tail.len + 48);
    out.cap = 64 * 1024;
    {
        long long span = end - start < max_rows ? end - start : max_rows;
        out.pulls = span > 0 ? (span + stride - 1) / stride : 0;
        out.limit = max_bytes > 0 ? (size_t)max_bytes : 0;
    }
    if (!(out.obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)out.cap)))
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
            int take = s->code == 0 && s->body && s->next > s->at;
            if (take) {
                if (deliver(&out, s, s->body, s->len, stride, &resume, &stopping, &f))
                    goto done;
            } else {                                     /* the caller's path */
                resume = s->at;
                stopping = 1;
            }
            PyMem_RawFree(s->body);
            s->body = NULL;
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
            h += sprintf(h, "%lld", ahead);
            memcpy(h, mid.buf, mid.len);
            h += mid.len;
            h += sprintf(h, "%ld", opaque);
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
            s->body = NULL;
            s->len = 0;
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
            if (in.len >= 4) {
                unsigned char *q = (unsigned char *)in.data + in.start;
                long long length = ((long long)q[0] << 24) | (q[1] << 16) | (q[2] << 8) | q[3];
                if (length < 4 || length + 4 > MAX_FRAME) {
                    snprintf(f.text, sizeof f.text, "bad frame length %lld", length);
                    f.kind = E_FRAME;
                    goto done;
                }
                if ((long long)in.len >= length + 4)
                    break;
            }
            if (fill(fd, &in, now_ms() + timeout_ms, &f))
                goto done;
        }
        unsigned char *q = (unsigned char *)in.data + in.start;
        size_t length = ((size_t)q[0] << 24) | ((size_t)q[1] << 16) | ((size_t)q[2] << 8) | q[3];
        size_t hlen = ((size_t)q[5] << 16) | ((size_t)q[6] << 8) | q[7];
        long long code = -1, flag = 0, op = -1, next = -1;
        int readable = q[4] == 0 && hlen <= length - 4 &&
                       scan_header((const char *)q + 8, hlen, &code, &flag, &op, &next) == 0;
        if (readable && !(flag & 1)) {            /* a request from the broker: not ours */
            in.start += length + 4;
            in.len -= length + 4;
            continue;
        }
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
                size_t blen = length - 4 - hlen;
                got_bytes += (long long)blen;
                if (hit == &slots[first] && next > hit->at) {
                    /* the next in order (as a broker mostly answers): from the receive
                       buffer straight to the output, not through a copy of its own */
                    if (deliver(&out, hit, (const char *)q + 8 + hlen, blen, stride, &resume, &stopping, &f))
                        goto done;
                    first = (first + 1) % depth;
                    count--;
                } else {
                    hit->body = PyMem_RawMalloc(blen ? blen : 1);
                    if (!hit->body) {
                        fail(&f, E_MEMORY, NULL);
                        goto done;
                    }
                    memcpy(hit->body, q + 8 + hlen, blen);
                    hit->len = blen;
                }
            }
        }
        in.start += length + 4;
        in.len -= length + 4;
        if (stopping) {          /* drop what is no longer delivered */
            for (int i = 0; i < count; i++) {
                PyMem_RawFree(slots[(first + i) % depth].body);
                slots[(first + i) % depth].body = NULL;
            }
            count = 0;
        }
    }
done:
    for (int i = 0; i < MAX_DEPTH; i++) {
        PyMem_RawFree(slots[i].body);
        slots[i].body = NULL;
    }
    PyMem_RawFree(frames);
    PyEval_RestoreThread(ts);
    if (f.kind != E_NONE) {
        raise_fail(&f);
    } else if (_PyBytes_Resize(&out.obj, (Py_ssize_t)out.len) == 0) {
        /* the delivered bodies, one after the other (records delimit themselves); the bytes
           read past the last answer due (none from a broker that only answers); where the
           records start (None when a size did not fit) */
        PyObject *starts = out.unwalked
            ? (Py_INCREF(Py_None), Py_None)
            : PyBytes_FromStringAndSize((const char *)out.starts, (Py_ssize_t)(out.nstarts * sizeof(int32_t)));
        if (starts) {
            result = Py_BuildValue("(NLly#N)", out.obj, resume, opaque, in.data ? in.data + in.start : "",
                                   (Py_ssize_t)in.len, starts);
            out.obj = NULL;     /* result owns it (or Py_BuildValue released it) */
        }
    }
    PyMem_RawFree(out.starts);
    PyMem_RawFree(in.data);
release:
    Py_XDECREF(out.obj);
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
