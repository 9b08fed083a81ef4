/*
 * Pull bodies to Arrow column buffers in one pass (the compiled half of columnar.py).
 *
 * How this works. decode(data, starts) walks the stored records at `starts` (positions in
 * `data`) once and fills, for all of them, the buffers of the source's Arrow columns:
 * fixed-width values (queue id and offset, timestamps in microseconds, reconsume times),
 * and offsets + bytes for the variable ones (topic, body, msg id, tags, keys, hosts, the
 * property map's names and values). Python wraps them with pa.Array.from_buffers. Any
 * record this path does not cover (magic V2, IPv6 hosts, sizes that do not add up, a
 * property name given twice, a compressed body its codec does not inflate) makes it return
 * None: the caller then uses the numpy path, whose per-message fallback gives damaged data
 * its precise error. Text is not checked for UTF-8 here; the caller validates the string
 * arrays.
 *
 * Compressed bodies (sysFlag bit 0; from 5.x the codec in bits 8-10, 0 from a 4.x producer
 * meaning zlib) are inflated here, the rest of their record decoded like any other: the
 * codecs are the Python ones the per-message path uses (remoting/compression.py INFLATE,
 * handed over once by set_inflaters), called per compressed body through the C API. So the
 * build needs no zlib, LZ4 or ZSTD headers, and both paths inflate with the same code. The
 * call may let other threads run (the codecs release the GIL): the bodies decoded are held
 * (a Py_buffer, or a list of the parts of our own) until the decode ends.
 *
 * decode_parts(bodies, starts=None) does the same over the records of several pull bodies
 * (a list of bytes), walked here, or where `starts` says they start (per body: bytes of
 * native int32 positions, as a compiled run of pulls noted them, or None): no joined copy,
 * no list of starts, and no walk over records that have left the cache.
 *
 * encode_parts(bodies, starts, start, end, last, broker, max_rows) keeps a batch's rows of a
 * window and returns them as one Arrow IPC message, written here with no pyarrow object (the
 * shared-memory files are made of these); set_layout gives it the message metadata to fill
 * in (below, "Arrow IPC messages").
 *
 * record_starts(data, base) walks a body's records and returns their start positions + base,
 * or raises ValueError when a size does not fit; count_records(data) returns how many there
 * are, with the same checks.
 *
 * The pure-Python path (columnar.py) stays the reference: tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define SLOW_FLAGS (0x10 | 0x20) /* born host v6, store host v6 */
#define COMPRESSED 0x1
#define COMPRESSION_TYPE_MASK 0x700  /* 5.x: LZ4 0x100, ZSTD 0x200, ZLIB 0x300; 0: zlib (4.x) */
#define COMPRESSION_TYPES 8
#define F_MAGIC 4
#define F_QUEUE_ID 12
#define F_QUEUE_OFFSET 20
#define F_PHYS 28
#define F_SYS_FLAG 36
#define F_BORN_TS 40
#define F_BORN_HOST 48
#define F_STORE_TS 56
#define F_STORE_HOST 64
#define F_RECONSUME 72
#define F_BODY_LEN 84
#define F_BODY 88
#define MIN_RECORD (F_BODY + 1 + 2)
#define MAX_PROPS 256

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int64_t be64(const uint8_t *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4));
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* A growing byte buffer with int32 offsets (one Arrow variable-width column), written
   straight into bytes objects that Python wraps as they are (no copy at the end). */
typedef struct {
    PyObject *data_obj;
    char *data;
    Py_ssize_t len, cap;
    PyObject *off_obj;
    int32_t *offsets; /* rows + 1, grown as rows come */
    Py_ssize_t off_cap;
    uint8_t *valid;   /* n, 1 = present (NULL when the column has no nulls) */
} Column;

/* A bytes object of `size` bytes to be filled (refcount 1: it can still be resized). */
static PyObject *new_bytes(Py_ssize_t size) { return PyBytes_FromStringAndSize(NULL, size); }

static int resize(PyObject **obj, Py_ssize_t size) { return _PyBytes_Resize(obj, size); }

static int col_init(Column *c, Py_ssize_t rows, Py_ssize_t cap, int nullable) {
    c->len = 0;
    c->cap = cap > 16 ? cap : 16;
    c->off_cap = rows + 1 > 16 ? rows + 1 : 16;
    c->data_obj = new_bytes(c->cap);
    c->off_obj = new_bytes(sizeof(int32_t) * c->off_cap);
    c->valid = nullable ? PyMem_Calloc(rows > 0 ? rows : 1, 1) : NULL;
    if (!c->data_obj || !c->off_obj || (nullable && !c->valid)) return -1;
    c->data = PyBytes_AS_STRING(c->data_obj);
    c->offsets = (int32_t *)PyBytes_AS_STRING(c->off_obj);
    c->offsets[0] = 0;
    return 0;
}

static void col_free(Column *c) {
    Py_CLEAR(c->data_obj);
    Py_CLEAR(c->off_obj);
    PyMem_Free(c->valid);
    c->valid = NULL;
}

/* Room in `c` for row `row`'s `n` bytes: the offsets and data grown (doubled) as needed.
   0, -1 out of memory. Rarely taken, so kept out of col_put's inlined path. */
static __attribute__((noinline)) int col_grow(Column *c, Py_ssize_t row, Py_ssize_t n) {
    if (row + 2 > c->off_cap) {
        Py_ssize_t cap = c->off_cap * 2;
        while (cap < row + 2) cap *= 2;
        if (resize(&c->off_obj, sizeof(int32_t) * cap) < 0) { PyErr_Clear(); return -1; }
        c->offsets = (int32_t *)PyBytes_AS_STRING(c->off_obj);
        c->off_cap = cap;
    }
    if (c->len + n > c->cap) {
        Py_ssize_t cap = c->cap * 2;
        while (cap < c->len + n) cap *= 2;
        if (resize(&c->data_obj, cap) < 0) { PyErr_Clear(); return -1; }
        c->data = PyBytes_AS_STRING(c->data_obj);
        c->cap = cap;
    }
    return 0;
}

/* memcpy for the short fields a record is mostly made of (names, ids, hosts), inlined as
   two overlapping moves instead of a call into libc per field; longer ones are libc's. */
static inline void copy_field(char *dst, const uint8_t *src, Py_ssize_t n) {
    if (n > 32) { memcpy(dst, src, n); return; }
    if (n >= 16) { memcpy(dst, src, 16); memcpy(dst + n - 16, src + n - 16, 16); return; }
    if (n >= 8) { memcpy(dst, src, 8); memcpy(dst + n - 8, src + n - 8, 8); return; }
    if (n >= 4) { memcpy(dst, src, 4); memcpy(dst + n - 4, src + n - 4, 4); return; }
    if (n > 0) { dst[0] = src[0]; dst[n >> 1] = src[n >> 1]; dst[n - 1] = src[n - 1]; }
}

/* 0, -1 out of memory, -2 past int32 offsets (the caller falls back) */
static inline int col_put(Column *c, Py_ssize_t row, const void *src, Py_ssize_t n) {
    if (__builtin_expect(row + 2 > c->off_cap || c->len + n > c->cap, 0) && col_grow(c, row, n) < 0)
        return -1;
    copy_field(c->data + c->len, src, n);
    c->len += n;
    if (__builtin_expect(c->len > INT32_MAX, 0)) return -2;
    c->offsets[row + 1] = (int32_t)c->len;
    if (c->valid) c->valid[row] = 1;
    return 0;
}

static void col_null(Column *c, Py_ssize_t row) { c->offsets[row + 1] = (int32_t)c->len; }

/* The column's bytes, handed over: (offsets bytes, data bytes, valid bytes or None). */
static PyObject *col_take(Column *c, Py_ssize_t rows) {
    if (resize(&c->off_obj, sizeof(int32_t) * (rows + 1)) < 0 || resize(&c->data_obj, c->len) < 0)
        return NULL;
    PyObject *val = c->valid ? PyBytes_FromStringAndSize((char *)c->valid, rows) : (Py_INCREF(Py_None), Py_None);
    if (!val) return NULL;
    PyObject *out = Py_BuildValue("(OON)", c->off_obj, c->data_obj, val);
    return out;
}

/* The decimal digits of v at out; returns the end. (snprintf's "%u" and "%d" cost more than
   the rest of a record's decoding, and born hosts change from record to record when a
   queue holds the messages of several producers.) */
static char *put_decimal(char *out, uint32_t v) {
    char digits[10];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *out++ = digits[--n];
    return out;
}

/* "a.b.c.d:port" of an IPv4 host + port (the port a signed int32, as stored) at out (at most 27
   bytes: "255.255.255.255:-2147483648"); returns its length. */
static int format_host(char *out, const uint8_t *p) {
    char *o = out;
    for (int i = 0; i < 4; i++) {
        o = put_decimal(o, p[i]);
        *o++ = i < 3 ? '.' : ':';
    }
    int32_t port = be32(p + 4);
    if (port < 0) *o++ = '-';
    o = put_decimal(o, port < 0 ? 0u - (uint32_t)port : (uint32_t)port);
    return (int)(o - out);
}

/* The last host's text is kept: hosts mostly repeat from record to record. */
typedef struct { uint8_t raw[8]; char text[32]; int len; int valid; } HostCache;

static int put_host(Column *c, Py_ssize_t row, const uint8_t *p, HostCache *cache) {
    if (!cache->valid || memcmp(cache->raw, p, 8) != 0) {
        cache->len = format_host(cache->text, p);
        memcpy(cache->raw, p, 8);
        cache->valid = 1;
    }
    return col_put(c, row, cache->text, cache->len);
}

static const char HEX[] = "0123456789ABCDEF";

static void hex16(char *out, const uint8_t *host8, const uint8_t *phys8) {
    for (int i = 0; i < 8; i++) { out[2 * i] = HEX[host8[i] >> 4]; out[2 * i + 1] = HEX[host8[i] & 15]; }
    for (int i = 0; i < 8; i++) { out[16 + 2 * i] = HEX[phys8[i] >> 4]; out[17 + 2 * i] = HEX[phys8[i] & 15]; }
}

typedef struct { const uint8_t *name, *value; int name_len, value_len; } Prop;

/* The kept pieces of a properties text ('k\1v\2k\1v...'), as decode_properties keeps them:
   a name before the first \1 and a value after it, both non-empty. -1: too many or a
   repeated name (the caller falls back). */
static int split_props(const uint8_t *p, int len, Prop *out) {
    int count = 0;
    const uint8_t *end = p + len;
    /* pieces between \2 separators, the last one up to the end (memchr: a byte loop over
       the text was half of a record's decoding) */
    for (const uint8_t *piece = p;; ) {
        const uint8_t *stop = memchr(piece, 2, end - piece);
        if (!stop) stop = end;
        const uint8_t *mark = memchr(piece, 1, stop - piece);
        if (mark) {
            int name_len = (int)(mark - piece), value_len = (int)(stop - mark - 1);
            if (name_len > 0 && value_len > 0) {
                for (int k = 0; k < count; k++)
                    if (out[k].name_len == name_len && memcmp(out[k].name, piece, name_len) == 0) return -1;
                if (count == MAX_PROPS) return -1;
                out[count].name = piece; out[count].name_len = name_len;
                out[count].value = mark + 1; out[count].value_len = value_len;
                count++;
            }
        }
        if (stop == end) break;
        piece = stop + 1;
    }
    return count;
}

static const Prop *find(const Prop *props, int n, const char *name) {
    int len = (int)strlen(name);
    for (int i = 0; i < n; i++)
        if (props[i].name_len == len && memcmp(props[i].name, name, len) == 0) return &props[i];
    return NULL;
}

/* ------------------------------------------------------------------ compressed bodies */

/* The codec of each compression type (sysFlag bits 8-10, shifted down): a callable taking the
   stored body (bytes) and returning it inflated (bytes), or NULL where none was set. */
static PyObject *inflaters[COMPRESSION_TYPES];

/* set_inflaters({type bits: callable}): the codecs, replacing those set before (keys are
   sysFlag & COMPRESSION_TYPE_MASK values). */
static PyObject *set_inflaters(PyObject *self, PyObject *args) {
    PyObject *table, *key, *value;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &table)) return NULL;
    PyObject *fresh[COMPRESSION_TYPES] = {NULL};
    Py_ssize_t at = 0;
    while (PyDict_Next(table, &at, &key, &value)) {
        long bits = PyLong_Check(key) ? PyLong_AsLong(key) : -1;
        if (bits == -1 && PyErr_Occurred()) PyErr_Clear();
        if (bits < 0 || (bits & ~(long)COMPRESSION_TYPE_MASK) || !PyCallable_Check(value)) {
            PyErr_Format(PyExc_ValueError, "set_inflaters takes {sysFlag compression type bits "
                         "(0, 0x100 ... 0x700): callable}, got %R: %R", key, value);
            for (int i = 0; i < COMPRESSION_TYPES; i++) Py_XDECREF(fresh[i]);
            return NULL;
        }
        Py_INCREF(value);
        Py_XSETREF(fresh[bits >> 8], value);
    }
    for (int i = 0; i < COMPRESSION_TYPES; i++) Py_XSETREF(inflaters[i], fresh[i]);
    Py_RETURN_NONE;
}

/* The stored body of a compressed record, inflated by its codec, into *out (a new bytes
   object): 1. 0 (no exception set) when this path leaves the record to the per-message one,
   which names the error: no codec for its type, the codec's error, or an answer that is not
   bytes. -1 with the exception set for what is no codec's error (out of memory, an
   interrupt: a signal's handler may run during the call). */
static int inflate_body(int32_t sys_flag, const uint8_t *body, int32_t len, PyObject **out) {
    PyObject *fn = inflaters[(sys_flag & COMPRESSION_TYPE_MASK) >> 8];
    if (!fn) return 0;
    Py_INCREF(fn);          /* held over the call: set_inflaters may replace it meanwhile */
    PyObject *arg = PyBytes_FromStringAndSize((const char *)body, len);
    PyObject *got = arg ? PyObject_CallOneArg(fn, arg) : NULL;
    Py_XDECREF(arg);
    Py_DECREF(fn);
    if (got && PyBytes_Check(got)) {
        *out = got;
        return 1;
    }
    Py_XDECREF(got);
    if (!got && (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError)))
        return -1;
    PyErr_Clear();
    return 0;
}

#define N_COLS 10
enum { C_TOPIC, C_BODY, C_MSGID, C_OFFID, C_TAGS, C_KEYS, C_BORN, C_STORE, C_PNAME, C_PVALUE };

/* How far ahead of the record being decoded its successors are fetched into cache: the
   bytes arrive from memory while the records before them are decoded. */
#define PREFETCH_RECORDS 4
#define PREFETCH_BYTES 512

static inline void prefetch_record(const uint8_t *rec, const uint8_t *end) {
    const uint8_t *stop = end - rec > PREFETCH_BYTES ? rec + PREFETCH_BYTES : end;
    for (const uint8_t *p = rec; p < stop; p += 64)
        __builtin_prefetch(p);
}

/* What decode_into fills: the variable-width columns, and the fixed-width ones in bytes
   objects (queue id, queue offset, born and store times, reconsume times, the map's
   offsets), for n rows and `entries` property entries. */
enum { F_QID, F_QOFF, F_BORN, F_STORE, F_RECON, F_MAP, N_FIXED };
static const Py_ssize_t FIXED_WIDTH[N_FIXED] = {4, 8, 8, 8, 4, 4};

typedef struct {
    Column cols[N_COLS];
    PyObject *fixed[N_FIXED];
    Py_ssize_t n;
    int32_t entries;
} Decoded;

static void decoded_free(Decoded *d) {
    for (int i = 0; i < N_COLS; i++) col_free(&d->cols[i]);
    for (int i = 0; i < N_FIXED; i++) Py_CLEAR(d->fixed[i]);
}

/* Fills `d` (zeroed by the caller) with the columns of the records at recs[0..n), record r
   ending at ends[r] (its first field, its size, must say so); size: their bytes in all (a
   bound for the body column). 1 done, 0 a record is not for this path, -1 an exception
   set. The caller frees `d` with decoded_free whatever it returns. */
static int decode_into(Decoded *d, const uint8_t **recs, const uint8_t **ends, Py_ssize_t n, Py_ssize_t size) {
    int ok = 1, err = 0;
    Column *cols = d->cols;
    d->n = n;
    for (int i = 0; i < N_FIXED; i++)
        if (!(d->fixed[i] = new_bytes(FIXED_WIDTH[i] * (n + 1)))) err = 1;
    Prop *props = PyMem_Malloc(sizeof(Prop) * MAX_PROPS);
    if (err || !props) { PyMem_Free(props); PyErr_NoMemory(); return -1; }
    int32_t *queue_id = (int32_t *)PyBytes_AS_STRING(d->fixed[F_QID]);
    int64_t *queue_offset = (int64_t *)PyBytes_AS_STRING(d->fixed[F_QOFF]);
    int64_t *born_ts = (int64_t *)PyBytes_AS_STRING(d->fixed[F_BORN]);
    int64_t *store_ts = (int64_t *)PyBytes_AS_STRING(d->fixed[F_STORE]);
    int32_t *reconsume = (int32_t *)PyBytes_AS_STRING(d->fixed[F_RECON]);
    int32_t *map_offsets = (int32_t *)PyBytes_AS_STRING(d->fixed[F_MAP]);
    int nullable[N_COLS] = {0, 0, 0, 0, 1, 1, 0, 0, 0, 0};
    /* first sizes: what records usually hold (a column outgrowing it is resized) */
    Py_ssize_t guess[N_COLS] = {n * 32, size, n * 32, n * 32, n * 16, n * 16, n * 28, n * 28, n * 48, n * 64};
    for (int i = 0; i < N_COLS && !err; i++)
        if (col_init(&cols[i], n, guess[i], nullable[i]) != 0) err = 1;
    if (err) { PyMem_Free(props); PyErr_NoMemory(); return -1; }
    map_offsets[0] = 0;
    int32_t entries = 0;
    HostCache born_cache = {{0}, {0}, 0, 0}, store_cache = {{0}, {0}, 0, 0};

    for (Py_ssize_t r = 0; r < PREFETCH_RECORDS && r < n; r++)
        prefetch_record(recs[r], ends[r]);
    for (Py_ssize_t r = 0; r < n && ok; r++) {
        if (r + PREFETCH_RECORDS < n)
            prefetch_record(recs[r + PREFETCH_RECORDS], ends[r + PREFETCH_RECORDS]);
        const uint8_t *rec = recs[r];
        const uint8_t *end = ends[r];
        if (end - rec < MIN_RECORD || be32(rec) != end - rec || be32(rec + F_MAGIC) != MAGIC_V1) { ok = 0; break; }
        int32_t sys_flag = be32(rec + F_SYS_FLAG);
        if (sys_flag & SLOW_FLAGS) { ok = 0; break; }
        int32_t body_len = be32(rec + F_BODY_LEN);
        const uint8_t *body = rec + F_BODY;
        if (body_len < 0 || body + body_len + 3 > end) { ok = 0; break; }
        const uint8_t *tp = body + body_len;
        int topic_len = (int8_t)tp[0];
        if (topic_len < 0 || tp + 1 + topic_len + 2 > end) { ok = 0; break; }
        const uint8_t *pp = tp + 1 + topic_len;
        int props_len = be16(pp);
        if (props_len < 0 || pp + 2 + props_len != end) { ok = 0; break; }
        int nprops = split_props(pp + 2, props_len, props);
        if (nprops < 0) { ok = 0; break; }
        /* a compressed body: the application's bytes go in the body column (inflated once the
           record is known to be whole, so a record that falls back costs no inflation) */
        PyObject *inflated = NULL;
        if (sys_flag & COMPRESSED) {
            int got = inflate_body(sys_flag, body, body_len, &inflated);
            if (got < 0) { err = 1; break; }
            if (got == 0) { ok = 0; break; }
        }

        queue_id[r] = be32(rec + F_QUEUE_ID);
        queue_offset[r] = be64(rec + F_QUEUE_OFFSET);
        born_ts[r] = be64(rec + F_BORN_TS) * 1000;
        store_ts[r] = be64(rec + F_STORE_TS) * 1000;
        reconsume[r] = be32(rec + F_RECONSUME);
        char offid[32];
        hex16(offid, rec + F_STORE_HOST, rec + F_PHYS);
        const Prop *uniq = find(props, nprops, "UNIQ_KEY");
        const Prop *tags = find(props, nprops, "TAGS");
        const Prop *keys = find(props, nprops, "KEYS");
        int rcs[10 + 2 * MAX_PROPS], nrc = 0;
        rcs[nrc++] = col_put(&cols[C_TOPIC], r, tp + 1, topic_len);
        if (inflated) {
            rcs[nrc++] = col_put(&cols[C_BODY], r, PyBytes_AS_STRING(inflated), PyBytes_GET_SIZE(inflated));
            Py_DECREF(inflated);
        } else {
            rcs[nrc++] = col_put(&cols[C_BODY], r, body, body_len);
        }
        rcs[nrc++] = uniq ? col_put(&cols[C_MSGID], r, uniq->value, uniq->value_len)
                          : col_put(&cols[C_MSGID], r, offid, 32);
        rcs[nrc++] = col_put(&cols[C_OFFID], r, offid, 32);
        if (tags) rcs[nrc++] = col_put(&cols[C_TAGS], r, tags->value, tags->value_len); else col_null(&cols[C_TAGS], r);
        if (keys) rcs[nrc++] = col_put(&cols[C_KEYS], r, keys->value, keys->value_len); else col_null(&cols[C_KEYS], r);
        rcs[nrc++] = put_host(&cols[C_BORN], r, rec + F_BORN_HOST, &born_cache);
        rcs[nrc++] = put_host(&cols[C_STORE], r, rec + F_STORE_HOST, &store_cache);
        for (int k = 0; k < nprops; k++) {
            rcs[nrc++] = col_put(&cols[C_PNAME], entries, props[k].name, props[k].name_len);
            rcs[nrc++] = col_put(&cols[C_PVALUE], entries, props[k].value, props[k].value_len);
            entries++;
        }
        map_offsets[r + 1] = entries;
        for (int k = 0; k < nrc; k++) {
            if (rcs[k] == -1) { PyErr_NoMemory(); err = 1; }
            else if (rcs[k] == -2) ok = 0;      /* a column past int32 offsets: fall back */
        }
        if (err) break;
    }
    PyMem_Free(props);
    d->entries = entries;
    return err ? -1 : ok;
}

/* decode's answer for what decode_into filled: (n, entries, fixed columns, variable ones). */
static PyObject *decoded_tuple(Decoded *d) {
    Py_ssize_t n = d->n;
    for (int i = 0; i < N_FIXED; i++)
        if (resize(&d->fixed[i], FIXED_WIDTH[i] * (i == F_MAP ? n + 1 : n)) < 0) return NULL;
    PyObject *fixed = Py_BuildValue("(OOOOOO)", d->fixed[0], d->fixed[1], d->fixed[2], d->fixed[3],
                                    d->fixed[4], d->fixed[5]);
    if (!fixed) return NULL;
    PyObject *vars = PyTuple_New(N_COLS);
    if (!vars) { Py_DECREF(fixed); return NULL; }
    for (int i = 0; i < N_COLS; i++) {
        Py_ssize_t rows = (i == C_PNAME || i == C_PVALUE) ? d->entries : n;
        PyObject *t = col_take(&d->cols[i], rows);
        if (!t) { Py_DECREF(fixed); Py_DECREF(vars); return NULL; }
        PyTuple_SET_ITEM(vars, i, t);
    }
    return Py_BuildValue("(nnNN)", n, (Py_ssize_t)d->entries, fixed, vars);
}

/* The columns of the records at recs[0..n) (decode_into's terms). New reference, Py_None
   when a record is not for this path, NULL with an exception set. */
static PyObject *decode_records(const uint8_t **recs, const uint8_t **ends, Py_ssize_t n, Py_ssize_t size) {
    Decoded d;
    memset(&d, 0, sizeof d);
    PyObject *result = NULL;
    int got = decode_into(&d, recs, ends, n, size);
    if (got == 0) { Py_INCREF(Py_None); result = Py_None; }
    else if (got == 1) result = decoded_tuple(&d);
    decoded_free(&d);
    return result;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *starts_obj;
    if (!PyArg_ParseTuple(args, "y*O", &buf, &starts_obj)) return NULL;
    PyObject *seq = PySequence_Fast(starts_obj, "starts must be a sequence of ints");
    if (!seq) { PyBuffer_Release(&buf); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const uint8_t *data = buf.buf;
    Py_ssize_t size = buf.len;
    PyObject *result = NULL;
    const uint8_t **recs = PyMem_Malloc(sizeof(*recs) * 2 * (n + 1));
    if (!recs) { PyErr_NoMemory(); goto done; }
    const uint8_t **ends = recs + n + 1;
    for (Py_ssize_t r = 0; r < n; r++) {
        Py_ssize_t pos = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, r));
        if (pos == -1 && PyErr_Occurred()) goto done;
        if (pos < 0 || pos + MIN_RECORD > size || pos + be32(data + pos) > size) {
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
        recs[r] = data + pos;
        ends[r] = data + pos + be32(data + pos);
    }
    result = decode_records(recs, ends, n, size);
done:
    PyMem_Free(recs);
    Py_DECREF(seq);
    PyBuffer_Release(&buf);
    return result;
}

/* Records in data[0..n): their count, and their starts and ends in out and out_end (when
   not NULL). -1 with ValueError set when a size does not fit. */
static Py_ssize_t walk(const uint8_t *data, Py_ssize_t n, const uint8_t **out, const uint8_t **out_end) {
    Py_ssize_t pos = 0, count = 0;
    while (pos < n) {
        if (pos + 4 > n) {
            PyErr_SetString(PyExc_ValueError, "stored message truncated in its header");
            return -1;
        }
        int32_t size = be32(data + pos);
        if (size < 4 || pos + size > n) {
            PyErr_Format(PyExc_ValueError, "stored message size %d does not fit the data", (int)size);
            return -1;
        }
        if (out) { out[count] = data + pos; out_end[count] = data + pos + size; }
        count++;
        pos += size;
    }
    return count;
}

static PyObject *count_records(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    Py_ssize_t count = walk(buf.buf, buf.len, NULL, NULL);
    PyBuffer_Release(&buf);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

/* Record starts a compiled run of pulls noted (native int32 positions, in the rows' order:
   a run's answers stay where they arrived, so not necessarily increasing, with frame
   headers between bodies): their count, after checking each has room in a part of `len`
   bytes at `data` for its size and the record that size says. -1 with ValueError set when
   not. The records' fields are checked as they are decoded. */
static Py_ssize_t noted(PyObject *starts, const uint8_t *data, Py_ssize_t len) {
    if (!PyBytes_Check(starts) || PyBytes_GET_SIZE(starts) % 4) {
        PyErr_SetString(PyExc_TypeError, "record starts must be bytes of int32");
        return -1;
    }
    Py_ssize_t count = PyBytes_GET_SIZE(starts) / 4;
    const int32_t *at = (const int32_t *)PyBytes_AS_STRING(starts);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (at[i] < 0 || (Py_ssize_t)at[i] + 4 > len || be32(data + at[i]) < 4
            || (Py_ssize_t)at[i] + be32(data + at[i]) > len) {
            PyErr_SetString(PyExc_ValueError, "record starts do not fit the data");
            return -1;
        }
    }
    if (count == 0 && len) {
        PyErr_SetString(PyExc_ValueError, "record starts do not fit the data");
        return -1;
    }
    return count;
}

/* The records of several bodies (a list of bytes) where they are: *recs and *ends (one
   allocation, freed by the caller with PyMem_Free(*recs)), their count and the bodies'
   bytes in all. `starts`: None, or a list giving for each body where its records start
   (bytes of int32, as a compiled run of pulls noted them) or None to walk it here.
   0, or -1 with an exception set. */
static int collect(PyObject *list, PyObject *starts, const uint8_t ***recs_out, const uint8_t ***ends_out,
                   Py_ssize_t *count_out, Py_ssize_t *total_out) {
    Py_ssize_t parts = PyList_GET_SIZE(list), total = 0, count = 0;
    if (starts != Py_None && (!PyList_Check(starts) || PyList_GET_SIZE(starts) != parts)) {
        PyErr_SetString(PyExc_TypeError, "starts must be a list as long as parts");
        return -1;
    }
    for (Py_ssize_t i = 0; i < parts; i++) {
        PyObject *part = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(part)) {
            PyErr_SetString(PyExc_TypeError, "parts must be bytes");
            return -1;
        }
        PyObject *known = starts == Py_None ? Py_None : PyList_GET_ITEM(starts, i);
        Py_ssize_t c = known == Py_None
            ? walk((const uint8_t *)PyBytes_AS_STRING(part), PyBytes_GET_SIZE(part), NULL, NULL)
            : noted(known, (const uint8_t *)PyBytes_AS_STRING(part), PyBytes_GET_SIZE(part));
        if (c < 0) return -1;
        count += c;
        total += PyBytes_GET_SIZE(part);
    }
    const uint8_t **recs = PyMem_Malloc(sizeof(*recs) * 2 * (count + 1));
    if (!recs) { PyErr_NoMemory(); return -1; }
    const uint8_t **ends = recs + count + 1;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < parts; i++) {
        PyObject *part = PyList_GET_ITEM(list, i);
        const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(part);
        Py_ssize_t len = PyBytes_GET_SIZE(part);
        PyObject *known = starts == Py_None ? Py_None : PyList_GET_ITEM(starts, i);
        if (known == Py_None) {
            at += walk(data, len, recs + at, ends + at);
            continue;
        }
        const int32_t *pos = (const int32_t *)PyBytes_AS_STRING(known);
        Py_ssize_t c = PyBytes_GET_SIZE(known) / 4;
        for (Py_ssize_t k = 0; k < c; k++) {     /* each ends where its size says (noted checked it) */
            recs[at + k] = data + pos[k];
            ends[at + k] = data + pos[k] + be32(data + pos[k]);
        }
        at += c;
    }
    *recs_out = recs;
    *ends_out = ends;
    *count_out = count;
    *total_out = total;
    return 0;
}

/* decode over the records of several bodies (a list of bytes), without joining them; the
   optional second list gives, for each body, where its records start (bytes of int32, as a
   compiled run of pulls noted them) or None to walk it here. */
static PyObject *decode_parts(PyObject *self, PyObject *args) {
    PyObject *list, *starts = Py_None;
    if (!PyArg_ParseTuple(args, "O!|O", &PyList_Type, &list, &starts)) return NULL;
    /* a list of our own holds the bodies while a codec lets other threads run */
    PyObject *held = PyList_GetSlice(list, 0, PY_SSIZE_T_MAX);
    if (!held) return NULL;
    const uint8_t **recs, **ends;
    Py_ssize_t count, total;
    PyObject *result = NULL;
    if (collect(held, starts, &recs, &ends, &count, &total) == 0) {
        result = decode_records(recs, ends, count, total);
        PyMem_Free(recs);
    }
    Py_DECREF(held);
    return result;
}

/* ------------------------------------------------------------------ Arrow IPC messages
 *
 * encode_parts(bodies, starts, start, end, last, broker, max_rows) does what
 * columnar.BodyBatcher does with one batch's bodies when the shared-memory reader takes
 * it: keeps the rows of the window (queue offsets in [start, end), each above the highest
 * one before it, `last` to begin with), decodes them, and returns them as one encapsulated
 * Arrow IPC record batch message of the source's schema, ready to be written to a stream:
 * (message bytes, rows, new last), (None, 0, last) when no row is kept, or None when this
 * path does not apply (a record decode declines, text that is not UTF-8, more than
 * max_rows rows): the caller then builds the batch with pyarrow from the same bodies. Text
 * (topics, property names and values, which tags, keys and UNIQ_KEY come from) is checked
 * to be UTF-8 here; text that is not goes the pyarrow way, which names the error.
 *
 * The message's metadata (a flatbuffer) has the same shape for every batch of the schema:
 * only the row counts, null counts, and buffer offsets and lengths change. set_layout takes
 * one made by pyarrow (columnar.py) and where those numbers are in it; each message is that
 * metadata with them written in, followed by the body: each buffer padded to 8 bytes.
 */
#define N_NODES 18
#define N_BUFFERS 46

static struct {
    char *meta;                 /* the flatbuffer after the message's 8-byte prefix */
    Py_ssize_t len;             /* its length, padded: what the prefix says */
    Py_ssize_t at_length, at_body_length, at_nodes, at_buffers;
} layout;

static PyObject *set_layout(PyObject *self, PyObject *args) {
    const char *meta;
    Py_ssize_t len, at_length, at_body, at_nodes, at_buffers;
    if (!PyArg_ParseTuple(args, "y#nnnn", &meta, &len, &at_length, &at_body, &at_nodes, &at_buffers))
        return NULL;
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    PyErr_SetString(PyExc_ValueError, "Arrow messages are written on little-endian hosts only");
    return NULL;
#endif
    if (len <= 0 || len % 8 || at_length < 0 || at_length + 8 > len || at_body < 0 || at_body + 8 > len
        || at_nodes < 0 || at_nodes + 16 * N_NODES > len || at_buffers < 0 || at_buffers + 16 * N_BUFFERS > len) {
        PyErr_SetString(PyExc_ValueError, "the layout does not fit its metadata");
        return NULL;
    }
    char *copy = PyMem_Malloc(len);
    if (!copy) return PyErr_NoMemory();
    memcpy(copy, meta, len);
    PyMem_Free(layout.meta);
    layout.meta = copy;
    layout.len = len;
    layout.at_length = at_length;
    layout.at_body_length = at_body;
    layout.at_nodes = at_nodes;
    layout.at_buffers = at_buffers;
    Py_RETURN_NONE;
}

static int ascii(const char *p, Py_ssize_t n) {
    uint64_t any = 0, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) { memcpy(&w, p + i, 8); any |= w; }
    for (; i < n; i++) any |= (uint8_t)p[i];
    return (any & 0x8080808080808080ULL) == 0;
}

/* Whether s[0..n) is UTF-8 as Arrow checks it (RFC 3629: no overlong forms, no surrogates,
   nothing past U+10FFFF). */
static int utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        int more;
        uint8_t lo = 0x80, hi = 0xBF;              /* the range of the byte after the lead */
        if (b >= 0xC2 && b <= 0xDF) more = 1;
        else if (b == 0xE0) { more = 2; lo = 0xA0; }
        else if (b >= 0xE1 && b <= 0xEC) more = 2;
        else if (b == 0xED) { more = 2; hi = 0x9F; }
        else if (b >= 0xEE && b <= 0xEF) more = 2;
        else if (b == 0xF0) { more = 3; lo = 0x90; }
        else if (b >= 0xF1 && b <= 0xF3) more = 3;
        else if (b == 0xF4) { more = 3; hi = 0x8F; }
        else return 0;
        if (i + more >= n) return 0;                  /* cut short */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += more + 1;
    }
    return 1;
}

/* Whether every value of a string column is UTF-8 (plain ASCII, the usual case, is seen in
   one pass over its bytes). */
static int column_utf8(const Column *c, Py_ssize_t rows) {
    if (ascii(c->data, c->len)) return 1;
    for (Py_ssize_t r = 0; r < rows; r++)
        if (!utf8((const uint8_t *)c->data + c->offsets[r], c->offsets[r + 1] - c->offsets[r])) return 0;
    return 1;
}

/* One buffer of the message body: the bytes object holding it (owned by the Decoded, or
   made here) and its length before padding. */
typedef struct { PyObject **obj; Py_ssize_t len; } Piece;

static inline Py_ssize_t pad8(Py_ssize_t n) { return (n + 7) & ~(Py_ssize_t)7; }

/* The validity bitmap of a nullable column (valid: a byte a row), into out[(n + 7) / 8];
   returns the null count. */
static Py_ssize_t bitmap(const uint8_t *valid, Py_ssize_t n, uint8_t *out) {
    Py_ssize_t nulls = 0;
    memset(out, 0, (n + 7) / 8);
    for (Py_ssize_t r = 0; r < n; r++) {
        if (valid[r]) out[r >> 3] |= (uint8_t)(1u << (r & 7));
        else nulls++;
    }
    return nulls;
}

/* The message of what `d` holds (n >= 1 rows), as the pieces a writer writes one after the
   other (a writev): the prefix with the metadata, then each non-empty buffer, padded to 8
   bytes with zeros. The buffers are the columns' own bytes objects (taken from `d`), so
   the body is not copied into one message first; the file's write is its only copy. */
static PyObject *message(Decoded *d, const char *broker, Py_ssize_t broker_len) {
    Py_ssize_t n = d->n, e = d->entries;
    Column *c = d->cols;
    Py_ssize_t bits = (n + 7) / 8;
    if (broker_len * n > INT32_MAX) Py_RETURN_NONE;
    /* the broker column (one text repeated) and the two bitmaps, made here */
    PyObject *made[4] = {new_bytes(sizeof(int32_t) * (n + 1)), new_bytes(broker_len * n), new_bytes(bits),
                         new_bytes(bits)};
    PyObject *head = NULL, *out = NULL;
    if (!made[0] || !made[1] || !made[2] || !made[3]) goto done;
    int32_t *broker_off = (int32_t *)PyBytes_AS_STRING(made[0]);
    char *broker_data = PyBytes_AS_STRING(made[1]);
    for (Py_ssize_t r = 0; r <= n; r++) broker_off[r] = (int32_t)(r * broker_len);
    for (Py_ssize_t r = 0; r < n; r++) memcpy(broker_data + r * broker_len, broker, broker_len);
    Py_ssize_t tag_nulls = bitmap(c[C_TAGS].valid, n, (uint8_t *)PyBytes_AS_STRING(made[2]));
    Py_ssize_t key_nulls = bitmap(c[C_KEYS].valid, n, (uint8_t *)PyBytes_AS_STRING(made[3]));
#define VAR(col, rows) {NULL, 0}, {&c[col].off_obj, 4 * ((rows) + 1)}, {&c[col].data_obj, c[col].len}
    Piece pieces[N_BUFFERS] = {
        VAR(C_TOPIC, n),
        {NULL, 0}, {&made[0], 4 * (n + 1)}, {&made[1], broker_len * n},
        {NULL, 0}, {&d->fixed[F_QID], 4 * n},
        {NULL, 0}, {&d->fixed[F_QOFF], 8 * n},
        VAR(C_MSGID, n),
        VAR(C_OFFID, n),
        {&made[2], tag_nulls ? bits : 0}, {&c[C_TAGS].off_obj, 4 * (n + 1)}, {&c[C_TAGS].data_obj, c[C_TAGS].len},
        {&made[3], key_nulls ? bits : 0}, {&c[C_KEYS].off_obj, 4 * (n + 1)}, {&c[C_KEYS].data_obj, c[C_KEYS].len},
        VAR(C_BODY, n),
        {NULL, 0}, {&d->fixed[F_MAP], 4 * (n + 1)},
        {NULL, 0},
        VAR(C_PNAME, e),
        VAR(C_PVALUE, e),
        {NULL, 0}, {&d->fixed[F_BORN], 8 * n},
        {NULL, 0}, {&d->fixed[F_STORE], 8 * n},
        VAR(C_BORN, n),
        VAR(C_STORE, n),
        {NULL, 0}, {&d->fixed[F_RECON], 4 * n},
    };
#undef VAR
    int64_t nodes[N_NODES][2] = {
        {n, 0}, {n, 0}, {n, 0}, {n, 0}, {n, 0}, {n, 0}, {n, tag_nulls}, {n, key_nulls}, {n, 0},
        {n, 0}, {e, 0}, {e, 0}, {e, 0}, {n, 0}, {n, 0}, {n, 0}, {n, 0}, {n, 0},
    };
    int64_t buffers[N_BUFFERS][2];
    Py_ssize_t body = 0, count = 1;
    for (int i = 0; i < N_BUFFERS; i++) {
        Py_ssize_t len = pieces[i].len, padded = pad8(len);
        buffers[i][0] = body;
        buffers[i][1] = len;
        body += padded;
        if (!len) continue;
        /* the buffer's object cut (or grown) to its padded length, the padding zeroed; a
           bytes object not shared yet (refcount 1) can be resized in place */
        if (Py_SIZE(*pieces[i].obj) != padded && resize(pieces[i].obj, padded) < 0) goto done;
        memset(PyBytes_AS_STRING(*pieces[i].obj) + len, 0, padded - len);
        count++;
    }
    head = new_bytes(8 + layout.len);
    if (!head) goto done;
    char *p = PyBytes_AS_STRING(head);
    uint32_t marker = 0xFFFFFFFFu;
    int32_t meta_len = (int32_t)layout.len;
    int64_t rows = n, body_len = body;
    memcpy(p, &marker, 4);
    memcpy(p + 4, &meta_len, 4);
    char *meta = p + 8;
    memcpy(meta, layout.meta, layout.len);
    memcpy(meta + layout.at_length, &rows, 8);
    memcpy(meta + layout.at_body_length, &body_len, 8);
    memcpy(meta + layout.at_nodes, nodes, sizeof nodes);
    memcpy(meta + layout.at_buffers, buffers, sizeof buffers);
    out = PyTuple_New(count);
    if (!out) goto done;
    PyTuple_SET_ITEM(out, 0, head);
    head = NULL;
    for (int i = 0, k = 1; i < N_BUFFERS; i++) {
        if (!pieces[i].len) continue;
        Py_INCREF(*pieces[i].obj);
        PyTuple_SET_ITEM(out, k++, *pieces[i].obj);
    }
done:
    Py_XDECREF(head);
    for (int i = 0; i < 4; i++) Py_XDECREF(made[i]);
    return out;
}

static PyObject *encode_parts(PyObject *self, PyObject *args) {
    PyObject *list, *starts;
    long long start, end, last;
    const char *broker;
    Py_ssize_t broker_len, max_rows;
    if (!PyArg_ParseTuple(args, "O!OLLLy#n", &PyList_Type, &list, &starts, &start, &end, &last,
                          &broker, &broker_len, &max_rows))
        return NULL;
    if (!layout.meta) {
        PyErr_SetString(PyExc_RuntimeError, "set_layout was not called");
        return NULL;
    }
    const uint8_t **recs, **ends;
    Py_ssize_t count, total, kept = 0;
    PyObject *held = PyList_GetSlice(list, 0, PY_SSIZE_T_MAX);  /* as in decode_parts */
    if (!held) return NULL;
    if (collect(held, starts, &recs, &ends, &count, &total) < 0) { Py_DECREF(held); return NULL; }
    PyObject *result = NULL;
    long long highest = last;
    for (Py_ssize_t r = 0; r < count; r++) {       /* the window's rows, each offset once */
        if (ends[r] - recs[r] < MIN_RECORD || be32(recs[r]) != ends[r] - recs[r]
            || be32(recs[r] + F_MAGIC) != MAGIC_V1) {    /* pyarrow's path gives the error */
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
        long long offset = be64(recs[r] + F_QUEUE_OFFSET);
        if (offset >= start && offset < end && offset > highest) {
            recs[kept] = recs[r];
            ends[kept] = ends[r];
            kept++;
        }
        if (offset > highest) highest = offset;
    }
    if (kept == 0) { result = Py_BuildValue("(OnL)", Py_None, (Py_ssize_t)0, last); goto done; }
    if (kept > max_rows) { Py_INCREF(Py_None); result = Py_None; goto done; }
    Decoded d;
    memset(&d, 0, sizeof d);
    int got = decode_into(&d, recs, ends, kept, total);
    if (got == 1 && !(column_utf8(&d.cols[C_TOPIC], kept) && column_utf8(&d.cols[C_PNAME], d.entries)
                      && column_utf8(&d.cols[C_PVALUE], d.entries)))
        got = 0;                     /* not UTF-8: pyarrow's path names the error */
    if (got == 0) { Py_INCREF(Py_None); result = Py_None; }
    else if (got == 1) {
        long long new_last = ((int64_t *)PyBytes_AS_STRING(d.fixed[F_QOFF]))[kept - 1];
        PyObject *msg = message(&d, broker, broker_len);
        if (msg == Py_None) result = msg;
        else if (msg) result = Py_BuildValue("(NnL)", msg, kept, new_last);
    }
    decoded_free(&d);
done:
    PyMem_Free(recs);
    Py_DECREF(held);
    return result;
}

static PyObject *record_starts(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t base = 0;
    if (!PyArg_ParseTuple(args, "y*|n", &buf, &base)) return NULL;
    PyObject *out = PyList_New(0);
    const uint8_t *data = buf.buf;
    Py_ssize_t pos = 0, n = buf.len;
    while (out && pos < n) {
        if (pos + 4 > n) {
            PyErr_SetString(PyExc_ValueError, "stored message truncated in its header");
            Py_CLEAR(out);
            break;
        }
        int32_t size = be32(data + pos);
        if (size < 4 || pos + size > n) {
            PyErr_Format(PyExc_ValueError, "stored message size %d does not fit the data", (int)size);
            Py_CLEAR(out);
            break;
        }
        PyObject *v = PyLong_FromSsize_t(base + pos);
        if (!v || PyList_Append(out, v) != 0) { Py_XDECREF(v); Py_CLEAR(out); break; }
        Py_DECREF(v);
        pos += size;
    }
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef METHODS[] = {
    {"decode", decode, METH_VARARGS, "Column buffers of the records at starts, or None."},
    {"record_starts", record_starts, METH_VARARGS, "Start positions (+ base) of a body's records."},
    {"count_records", count_records, METH_VARARGS, "How many records a body holds (its sizes checked)."},
    {"decode_parts", decode_parts, METH_VARARGS, "decode over the records of several bodies (and their starts), or None."},
    {"set_layout", set_layout, METH_VARARGS, "The Arrow message metadata encode_parts fills in, and where its numbers go."},
    {"set_inflaters", set_inflaters, METH_VARARGS, "The codecs of compressed bodies: {sysFlag type bits: inflate(bytes) -> bytes}."},
    {"encode_parts", encode_parts, METH_VARARGS, "A batch's kept rows as one Arrow IPC message, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_fastcolumnar", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__fastcolumnar(void) { return PyModule_Create(&MODULE); }
