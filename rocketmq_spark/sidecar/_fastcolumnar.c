/*
 * Pull bodies to Arrow column buffers in one pass (the compiled half of columnar.py).
 *
 * How this works. decode(data, starts) walks the stored records at `starts` (positions in
 * `data`) once and fills, for all of them, the buffers of the source's Arrow columns:
 * fixed-width values (queue id and offset, timestamps in microseconds, reconsume times),
 * and offsets + bytes for the variable ones (topic, body, msg id, tags, keys, hosts, the
 * property map's names and values). Python wraps them with pa.Array.from_buffers. Any
 * record this path does not cover (magic V2, IPv6 hosts, a compressed body, sizes that do
 * not add up, a property name given twice) makes it return None: the caller then uses the
 * numpy path, whose per-message fallback gives damaged data its precise error. Text is not
 * checked for UTF-8 here; the caller validates the string arrays.
 *
 * record_starts(data, base) walks a body's records and returns their start positions + base,
 * or raises ValueError when a size does not fit.
 *
 * The pure-Python path (columnar.py) stays the reference: tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define SLOW_FLAGS (0x10 | 0x20 | 0x1) /* born host v6, store host v6, compressed */
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

/* A growing byte buffer with int32 offsets (one Arrow variable-width column). */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
    int32_t *offsets; /* rows + 1, grown as rows come */
    Py_ssize_t off_cap;
    uint8_t *valid;   /* n, 1 = present (NULL when the column has no nulls) */
} Column;

static int col_init(Column *c, Py_ssize_t rows, Py_ssize_t cap, int nullable) {
    c->len = 0;
    c->cap = cap > 16 ? cap : 16;
    c->off_cap = rows + 1 > 16 ? rows + 1 : 16;
    c->data = PyMem_Malloc(c->cap);
    c->offsets = PyMem_Malloc(sizeof(int32_t) * c->off_cap);
    c->valid = nullable ? PyMem_Calloc(rows > 0 ? rows : 1, 1) : NULL;
    if (!c->data || !c->offsets || (nullable && !c->valid)) return -1;
    c->offsets[0] = 0;
    return 0;
}

static void col_free(Column *c) {
    PyMem_Free(c->data);
    PyMem_Free(c->offsets);
    PyMem_Free(c->valid);
}

/* 0, -1 out of memory, -2 past int32 offsets (the caller falls back) */
static int col_put(Column *c, Py_ssize_t row, const void *src, Py_ssize_t n) {
    if (row + 2 > c->off_cap) {
        Py_ssize_t cap = c->off_cap * 2;
        int32_t *o = PyMem_Realloc(c->offsets, sizeof(int32_t) * cap);
        if (!o) return -1;
        c->offsets = o;
        c->off_cap = cap;
    }
    if (c->len + n > c->cap) {
        Py_ssize_t cap = c->cap * 2;
        while (cap < c->len + n) cap *= 2;
        char *d = PyMem_Realloc(c->data, cap);
        if (!d) return -1;
        c->data = d;
        c->cap = cap;
    }
    memcpy(c->data + c->len, src, n);
    c->len += n;
    if (c->len > INT32_MAX) return -2;
    c->offsets[row + 1] = (int32_t)c->len;
    if (c->valid) c->valid[row] = 1;
    return 0;
}

static void col_null(Column *c, Py_ssize_t row) { c->offsets[row + 1] = (int32_t)c->len; }

/* Bytes of a column as Python objects: (offsets bytes, data bytes[, valid bytes]). */
static PyObject *col_take(Column *c, Py_ssize_t rows) {
    PyObject *off = PyBytes_FromStringAndSize((char *)c->offsets, sizeof(int32_t) * (rows + 1));
    PyObject *dat = PyBytes_FromStringAndSize(c->data, c->len);
    PyObject *val = c->valid ? PyBytes_FromStringAndSize((char *)c->valid, rows) : (Py_INCREF(Py_None), Py_None);
    if (!off || !dat || !val) {
        Py_XDECREF(off); Py_XDECREF(dat); Py_XDECREF(val);
        return NULL;
    }
    return Py_BuildValue("(NNN)", off, dat, val);
}

/* "a.b.c.d:port" of an IPv4 host + port; hosts repeat from record to record, so the last
   one's text is kept (snprintf costs more than the rest of a record's decoding). */
typedef struct { uint8_t raw[8]; char text[32]; int len; int valid; } HostCache;

static int put_host(Column *c, Py_ssize_t row, const uint8_t *p, HostCache *cache) {
    if (!cache->valid || memcmp(cache->raw, p, 8) != 0) {
        cache->len = snprintf(cache->text, sizeof cache->text, "%u.%u.%u.%u:%d",
                              p[0], p[1], p[2], p[3], (int)be32(p + 4));
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
    int count = 0, start = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && p[i] != 2) continue;
        const uint8_t *piece = p + start;
        int plen = i - start;
        start = i + 1;
        const uint8_t *mark = memchr(piece, 1, plen);
        if (!mark) continue;
        int name_len = (int)(mark - piece), value_len = plen - name_len - 1;
        if (name_len <= 0 || value_len <= 0) continue;
        for (int k = 0; k < count; k++)
            if (out[k].name_len == name_len && memcmp(out[k].name, piece, name_len) == 0) return -1;
        if (count == MAX_PROPS) return -1;
        out[count].name = piece; out[count].name_len = name_len;
        out[count].value = mark + 1; out[count].value_len = value_len;
        count++;
    }
    return count;
}

static const Prop *find(const Prop *props, int n, const char *name) {
    int len = (int)strlen(name);
    for (int i = 0; i < n; i++)
        if (props[i].name_len == len && memcmp(props[i].name, name, len) == 0) return &props[i];
    return NULL;
}

#define N_COLS 10
enum { C_TOPIC, C_BODY, C_MSGID, C_OFFID, C_TAGS, C_KEYS, C_BORN, C_STORE, C_PNAME, C_PVALUE };

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
    int ok = 1, err = 0;

    Column cols[N_COLS];
    memset(cols, 0, sizeof cols);
    int32_t *queue_id = PyMem_Malloc(sizeof(int32_t) * (n + 1));
    int64_t *queue_offset = PyMem_Malloc(sizeof(int64_t) * (n + 1));
    int64_t *born_ts = PyMem_Malloc(sizeof(int64_t) * (n + 1));
    int64_t *store_ts = PyMem_Malloc(sizeof(int64_t) * (n + 1));
    int32_t *reconsume = PyMem_Malloc(sizeof(int32_t) * (n + 1));
    int32_t *map_offsets = PyMem_Malloc(sizeof(int32_t) * (n + 1));
    Prop *props = PyMem_Malloc(sizeof(Prop) * MAX_PROPS);
    if (!queue_id || !queue_offset || !born_ts || !store_ts || !reconsume || !map_offsets || !props) err = 1;
    int nullable[N_COLS] = {0, 0, 0, 0, 1, 1, 0, 0, 0, 0};
    Py_ssize_t guess[N_COLS] = {n * 16, size, n * 32, n * 32, n * 8, n * 16, n * 20, n * 20, n * 40, n * 40};
    for (int i = 0; i < N_COLS && !err; i++)
        if (col_init(&cols[i], n, guess[i], nullable[i]) != 0) err = 1;
    if (err) { PyErr_NoMemory(); goto done; }
    map_offsets[0] = 0;
    int32_t entries = 0;
    HostCache born_cache = {{0}, {0}, 0, 0}, store_cache = {{0}, {0}, 0, 0};

    for (Py_ssize_t r = 0; r < n && ok; r++) {
        Py_ssize_t pos = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, r));
        if (pos == -1 && PyErr_Occurred()) { err = 1; break; }
        if (pos < 0 || pos + MIN_RECORD > size) { ok = 0; break; }
        const uint8_t *rec = data + pos;
        int32_t rsize = be32(rec);
        if (rsize < MIN_RECORD || pos + rsize > size || be32(rec + F_MAGIC) != MAGIC_V1
            || (be32(rec + F_SYS_FLAG) & SLOW_FLAGS)) { ok = 0; break; }
        const uint8_t *end = rec + rsize;
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
        rcs[nrc++] = col_put(&cols[C_BODY], r, body, body_len);
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
    if (err) goto done;
    if (!ok) { Py_INCREF(Py_None); result = Py_None; goto done; }
    {
        PyObject *fixed = Py_BuildValue(
            "(y#y#y#y#y#y#)",
            (char *)queue_id, (Py_ssize_t)(sizeof(int32_t) * n), (char *)queue_offset, (Py_ssize_t)(sizeof(int64_t) * n),
            (char *)born_ts, (Py_ssize_t)(sizeof(int64_t) * n), (char *)store_ts, (Py_ssize_t)(sizeof(int64_t) * n),
            (char *)reconsume, (Py_ssize_t)(sizeof(int32_t) * n), (char *)map_offsets, (Py_ssize_t)(sizeof(int32_t) * (n + 1)));
        if (!fixed) goto done;
        PyObject *vars = PyTuple_New(N_COLS);
        if (!vars) { Py_DECREF(fixed); goto done; }
        for (int i = 0; i < N_COLS; i++) {
            Py_ssize_t rows = (i == C_PNAME || i == C_PVALUE) ? entries : n;
            PyObject *t = col_take(&cols[i], rows);
            if (!t) { Py_DECREF(fixed); Py_DECREF(vars); goto done; }
            PyTuple_SET_ITEM(vars, i, t);
        }
        result = Py_BuildValue("(nnNN)", n, (Py_ssize_t)entries, fixed, vars);
    }
done:
    for (int i = 0; i < N_COLS; i++) col_free(&cols[i]);
    PyMem_Free(queue_id); PyMem_Free(queue_offset); PyMem_Free(born_ts); PyMem_Free(store_ts);
    PyMem_Free(reconsume); PyMem_Free(map_offsets); PyMem_Free(props);
    Py_DECREF(seq);
    PyBuffer_Release(&buf);
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_fastcolumnar", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__fastcolumnar(void) { return PyModule_Create(&MODULE); }
