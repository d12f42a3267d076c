/* The records of a Kafka record batch (its records section, decompressed), walked in C:
 * their values joined by newlines into one bytes object, with no Python object per
 * record; and such a body of JSON objects parsed into columns (`json_columns`, below). `kafka_batches.py` reads the batches' headers and has
 * the same walk in Python (`records_of`): the rows a batch of odd values falls back to,
 * and the tests' oracle for this one.
 *
 * A record (Kafka's record format v2): length (varint), attributes (int8), timestamp
 * delta (varlong), offset delta (varint), key length (varint, -1: null), key, value length
 * (varint, -1: null), value, headers (count, then each), every varint zigzag-encoded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
/* (Python.h defines _GNU_SOURCE: strtod_l, a number's "." whatever the locale) */
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* A zigzag varint of at most 10 bytes at *at, below end; 0 if it runs past end. */
static int read_varint(const unsigned char **at, const unsigned char *end, long long *out) {
    unsigned long long raw = 0;
    int shift = 0;
    const unsigned char *p = *at;
    while (p < end && shift < 70) {
        unsigned char b = *p++;
        raw |= (unsigned long long)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (long long)(raw >> 1) ^ -(long long)(raw & 1);
            *at = p;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* A record's head at *at: where it ends (*next), its timestamp and offset deltas, and its
 * key (*key, *key_len; -1: null), *at left at the value's length; NULL, or the field that
 * runs past the batch's end. */
typedef struct {
    const unsigned char *next, *key;
    long long ts_delta, delta, key_len;
} Head;

static const char *read_head(const unsigned char **at, const unsigned char *end, Head *h) {
    const unsigned char *p = *at;
    long long length;
    if (!read_varint(&p, end, &length) || length < 0 || length > end - p)
        return "length";
    h->next = p + length;
    p++;  /* attributes */
    if (p > h->next || !read_varint(&p, h->next, &h->ts_delta)
            || !read_varint(&p, h->next, &h->delta))
        return "timestamp or offset";
    if (!read_varint(&p, h->next, &h->key_len) || h->key_len > h->next - p)
        return "key";
    h->key = p;
    if (h->key_len > 0)
        p += h->key_len;
    *at = p;
    return NULL;
}

#define TRUNCATED(what) do { \
    PyErr_Format(PyExc_ValueError, "Kafka record %zd of %zd: its %s runs past the batch's " \
                 "end", i, count, what); goto fail; } while (0)

/* join_values(records, count, base_offset, first_offset)
 *   -> (values joined by b"\n", how many, the last offset walked, odd)
 * Records before first_offset (a fetch from the middle of a batch) are left out; odd is 1
 * when a value is null, 2 when a value holds a newline (then the caller reads rows). */
static PyObject *join_values(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count;
    long long base_offset, first_offset;
    if (!PyArg_ParseTuple(args, "y*nLL", &buf, &count, &base_offset, &first_offset))
        return NULL;
    /* Each value and its newline fit in its record's bytes (a record is at least its
     * length and its attributes besides the value). */
    PyObject *joined = PyBytes_FromStringAndSize(NULL, buf.len);
    if (joined == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(joined), *w = out;
    const unsigned char *p = buf.buf, *end = p + buf.len;
    Py_ssize_t taken = 0, i = 0;
    long long last = -1;
    int odd = 0;
    for (; i < count; i++) {
        Head h;
        long long value_len;
        const char *short_field = read_head(&p, end, &h);
        if (short_field != NULL)
            TRUNCATED(short_field);
        const unsigned char *next = h.next;
        if (!read_varint(&p, next, &value_len) || value_len > next - p)
            TRUNCATED("value");
        long long offset = base_offset + h.delta;
        if (offset >= first_offset) {
            if (taken)
                *w++ = '\n';
            if (value_len < 0) {
                odd |= 1;
            } else {
                if (memchr(p, '\n', (size_t)value_len) != NULL)
                    odd |= 2;
                memcpy(w, p, (size_t)value_len);
                w += value_len;
            }
            taken++;
            last = offset;
        }
        p = next;  /* the headers are not read */
    }
    PyBuffer_Release(&buf);
    if (_PyBytes_Resize(&joined, w - out) < 0)
        return NULL;
    return Py_BuildValue("(NnLi)", joined, taken, last, odd);
fail:
    PyBuffer_Release(&buf);
    Py_DECREF(joined);
    return NULL;
}


/* record_meta(records, count, base_offset, first_offset, base_timestamp)
 *   -> (n, offsets, timestamps, key validity or None, key offsets, key bytes)
 * The records' offsets and timestamps (int64 each) and keys (an Arrow binary column's
 * buffers: a null key's validity bit 0) from first_offset on, in the order of
 * join_values: a source's record fields as columns. */
static PyObject *record_meta(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count;
    long long base_offset, first_offset, base_timestamp;
    if (!PyArg_ParseTuple(args, "y*nLLL", &buf, &count, &base_offset, &first_offset,
                          &base_timestamp))
        return NULL;
    if (buf.len > INT32_MAX) {  /* (key offsets are int32; a fetch is megabytes) */
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "a record batch of 2 GB or more");
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t bitmap = (count + 7) / 8, taken = 0, nulls = 0, used = 0, i = 0;
    long long *offsets = PyMem_Calloc((size_t)count + 1, sizeof(long long));
    long long *stamps = PyMem_Calloc((size_t)count + 1, sizeof(long long));
    int32_t *key_offsets = PyMem_Calloc((size_t)count + 1, sizeof(int32_t));
    unsigned char *valid = PyMem_Calloc((size_t)bitmap + 1, 1);
    char *keys = PyMem_Malloc((size_t)buf.len + 1);
    if (!offsets || !stamps || !key_offsets || !valid || !keys) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *p = buf.buf, *end = p + buf.len;
    for (; i < count; i++) {
        Head h;
        const char *short_field = read_head(&p, end, &h);
        if (short_field != NULL)
            TRUNCATED(short_field);
        if (base_offset + h.delta >= first_offset) {
            offsets[taken] = base_offset + h.delta;
            stamps[taken] = base_timestamp + h.ts_delta;
            if (h.key_len < 0) {
                nulls++;
            } else {
                memcpy(keys + used, h.key, (size_t)h.key_len);
                used += h.key_len;
                valid[taken >> 3] |= (unsigned char)(1 << (taken & 7));
            }
            key_offsets[taken + 1] = (int32_t)used;
            taken++;
        }
        p = h.next;
    }
    result = Py_BuildValue(
        "(ny#y#Ny#y#)", taken, (const char *)offsets, (Py_ssize_t)(8 * taken),
        (const char *)stamps, (Py_ssize_t)(8 * taken),
        nulls ? PyBytes_FromStringAndSize((const char *)valid, (taken + 7) / 8)
              : Py_NewRef(Py_None),
        (const char *)key_offsets, (Py_ssize_t)(4 * (taken + 1)), keys, used);
done:
fail:
    PyMem_Free(offsets);
    PyMem_Free(stamps);
    PyMem_Free(key_offsets);
    PyMem_Free(valid);
    PyMem_Free(keys);
    PyBuffer_Release(&buf);
    return result;
}

/* ---- JSON objects, one a line, into columns ----------------------------------------
 * The common case of a source's values, parsed in C: flat objects whose fields are the
 * schema's (int, float, str, bool; null or missing: a null), strings of ASCII with no
 * escape. Anything else (a field not in the schema, a nested value, an escape, a byte
 * past ASCII, a number an int field cannot hold as it is written) and the whole body
 * goes to pyarrow's JSON reader instead: this returns None. */

enum { K_INT = 'i', K_FLOAT = 'f', K_STR = 's', K_BOOL = 'b' };

static locale_t c_locale;  /* made when the module loads */

typedef struct {
    char kind;
    const char *name;
    Py_ssize_t name_len;
    char *values;      /* int64 / float64 / bool bits / string bytes */
    Py_ssize_t cap, used;  /* string bytes */
    int32_t *offsets;  /* strings */
    unsigned char *valid;
    Py_ssize_t nulls;
} Column;

static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* A JSON number's end from p (its grammar checked), or NULL; *integral: no fraction
 * or exponent. */
static const unsigned char *number_end(const unsigned char *p, const unsigned char *end,
                                       int *integral) {
    *integral = 1;
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    if (p < end && *p == '.') {
        *integral = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integral = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    return p;
}

/* A JSON number (its grammar checked) as the double nearest to it, in the common case
 * of digits that make an integer of at most 2^53 and a power of ten within 22 (Clinger's
 * fast path: both are exact doubles, so one IEEE division rounds right); 0 otherwise
 * (strtod_l then). */
static int exact_double(const unsigned char *p, const unsigned char *end, double *out) {
    static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                    1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
                                    1e20, 1e21, 1e22};
    int negative = p < end && *p == '-', digits = 0, exp10 = 0;
    unsigned long long m = 0;
    p += negative;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0')
            digits++;
        m = m * 10 + (unsigned long long)(*p - '0');
        if (digits > 17)
            return 0;
    }
    if (p < end && *p == '.')
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            if (m || *p != '0')
                digits++;
            m = m * 10 + (unsigned long long)(*p - '0');
            exp10--;
            if (digits > 17)
                return 0;
        }
    if (p < end && (*p == 'e' || *p == 'E'))
        return 0;
    if (exp10 < -22 || m > (1ULL << 53))
        return 0;
    double v = (double)m / powers[-exp10];
    *out = negative ? -v : v;
    return 1;
}

static int parse_value(Column *c, Py_ssize_t row, const unsigned char **at,
                       const unsigned char *end) {
    const unsigned char *p = *at;
    if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
        *at = p + 4;
        return 1;  /* valid bit left 0 */
    }
    if (c->kind == K_BOOL) {
        if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
            c->values[row >> 3] |= (char)(1 << (row & 7));
            *at = p + 4;
        } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
            *at = p + 5;
        } else {
            return 0;
        }
    } else if (c->kind == K_STR) {
        if (p >= end || *p != '"')
            return 0;
        const unsigned char *q = ++p;
        while (q < end && *q != '"') {
            if (*q == '\\' || *q < 0x20 || *q >= 0x80)
                return 0;
            q++;
        }
        if (q >= end)
            return 0;
        Py_ssize_t len = q - p;
        if (c->used + len > c->cap) {
            Py_ssize_t cap = (c->cap + len) * 2;
            char *grown = PyMem_Realloc(c->values, (size_t)cap);
            if (grown == NULL)
                return -1;
            c->values = grown;
            c->cap = cap;
        }
        memcpy(c->values + c->used, p, (size_t)len);
        c->used += len;
        c->offsets[row + 1] = (int32_t)c->used;
        *at = q + 1;
    } else {
        int integral;
        const unsigned char *q = number_end(p, end, &integral);
        if (q == NULL)
            return 0;
        if (c->kind == K_INT) {
            /* As written: an integer of at most 18 digits (no overflow to think of). */
            Py_ssize_t digits = q - p - (*p == '-');
            if (!integral || digits > 18)
                return 0;
            long long v = 0;
            for (const unsigned char *d = p + (*p == '-'); d < q; d++)
                v = v * 10 + (*d - '0');
            ((long long *)c->values)[row] = *p == '-' ? -v : v;
        } else {
            char buf[64];
            if (q - p >= (Py_ssize_t)sizeof buf)
                return 0;
            memcpy(buf, p, (size_t)(q - p));
            buf[q - p] = 0;
            double v;
            if (!exact_double(p, q, &v)) {
                char *stop;
                v = strtod_l(buf, &stop, c_locale);
                if (stop != buf + (q - p) || !isfinite(v))  /* out of range: pyarrow's */
                    return 0;
            }
            ((double *)c->values)[row] = v;
        }
        *at = q;
    }
    c->valid[row >> 3] |= (unsigned char)(1 << (row & 7));
    return 1;
}

static PyObject *bytes_of(const void *data, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)data, n);
}

/* json_columns(body, n, fields) -> [(validity or None, values, offsets or None), ...] or
 * None; fields: ((name: bytes, kind: 'i' | 'f' | 's' | 'b'), ...), at most 64. */
static PyObject *json_columns(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t n;
    PyObject *fields;
    if (!PyArg_ParseTuple(args, "y*nO!", &buf, &n, &PyTuple_Type, &fields))
        return NULL;
    Py_ssize_t nf = PyTuple_GET_SIZE(fields), bitmap = (n + 7) / 8;
    PyObject *result = NULL;
    Column *cols = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof(Column));
    if (cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (nf > 64 || n < 0 || buf.len > INT32_MAX) {  /* (string offsets are int32) */
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t f = 0; f < nf; f++) {
        Column *c = &cols[f];
        PyObject *item = PyTuple_GET_ITEM(fields, f);
        char *kind;
        Py_ssize_t kind_len;
        if (!PyArg_ParseTuple(item, "y#s#", &c->name, &c->name_len, &kind, &kind_len))
            goto done;
        c->kind = kind[0];
        c->valid = PyMem_Calloc((size_t)bitmap + 1, 1);
        if (c->kind == K_STR) {
            c->cap = 16 * n + 16;
            c->values = PyMem_Malloc((size_t)c->cap);
            c->offsets = PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
        } else {
            c->values = PyMem_Calloc((size_t)(c->kind == K_BOOL ? bitmap + 1 : 8 * n + 8), 1);
        }
        if (c->valid == NULL || c->values == NULL || (c->kind == K_STR && c->offsets == NULL)) {
            PyErr_NoMemory();
            goto done;
        }
    }
    const unsigned char *p = buf.buf, *end = p + buf.len;
    int ok = 1;
    for (Py_ssize_t row = 0; row < n && ok; row++) {
        unsigned long long seen = 0;
        p = skip_ws(p, end);
        if (p >= end || *p++ != '{') { ok = 0; break; }
        p = skip_ws(p, end);
        if (p < end && *p == '}') {
            p++;
        } else {
            for (;;) {
                if (p >= end || *p != '"') { ok = 0; break; }
                const unsigned char *name = ++p;
                while (p < end && *p != '"' && *p != '\\')
                    p++;
                if (p >= end || *p != '"') { ok = 0; break; }
                Py_ssize_t len = p - name, f = 0;
                p++;
                for (; f < nf; f++)
                    if (cols[f].name_len == len && memcmp(cols[f].name, name, (size_t)len) == 0)
                        break;
                if (f == nf || (seen >> f) & 1) { ok = 0; break; }
                seen |= 1ULL << f;
                p = skip_ws(p, end);
                if (p >= end || *p++ != ':') { ok = 0; break; }
                p = skip_ws(p, end);
                int r = parse_value(&cols[f], row, &p, end);
                if (r < 0) { PyErr_NoMemory(); goto done; }
                if (r == 0) { ok = 0; break; }
                p = skip_ws(p, end);
                if (p < end && *p == ',') { p = skip_ws(p + 1, end); continue; }
                if (p < end && *p == '}') { p++; break; }
                ok = 0;
                break;
            }
        }
        if (!ok)
            break;
        for (Py_ssize_t f = 0; f < nf; f++)  /* (a null or missing string: empty) */
            if (cols[f].kind == K_STR)
                cols[f].offsets[row + 1] = (int32_t)cols[f].used;
        p = skip_ws(p, end);
        if (row + 1 < n) {
            if (p >= end || *p++ != '\n') { ok = 0; break; }
        } else if (p != end) {
            ok = 0;
        }
    }
    if (!ok) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = PyList_New(nf);
    if (result == NULL)
        goto done;
    for (Py_ssize_t f = 0; f < nf; f++) {
        Column *c = &cols[f];
        Py_ssize_t valid = 0;
        for (Py_ssize_t row = 0; row < n; row++)
            valid += (c->valid[row >> 3] >> (row & 7)) & 1;
        PyObject *validity = valid == n ? Py_NewRef(Py_None) : bytes_of(c->valid, bitmap);
        PyObject *values = c->kind == K_STR ? bytes_of(c->values, c->used)
            : bytes_of(c->values, c->kind == K_BOOL ? bitmap : 8 * n);
        PyObject *offsets = c->kind == K_STR ? bytes_of(c->offsets, 4 * (n + 1))
            : Py_NewRef(Py_None);
        PyObject *item = (validity && values && offsets)
            ? Py_BuildValue("(NNNn)", validity, values, offsets, n - valid) : NULL;
        if (item == NULL) {
            Py_XDECREF(validity); Py_XDECREF(values); Py_XDECREF(offsets);
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, f, item);
    }
done:
    if (cols != NULL) {
        for (Py_ssize_t f = 0; f < nf; f++) {
            PyMem_Free(cols[f].values);
            PyMem_Free(cols[f].offsets);
            PyMem_Free(cols[f].valid);
        }
        PyMem_Free(cols);
    }
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"join_values", join_values, METH_VARARGS,
     "join_values(records, count, base_offset, first_offset) -> (joined, n, last_offset, odd)"},
    {"record_meta", record_meta, METH_VARARGS,
     "record_meta(records, count, base_offset, first_offset, base_timestamp) -> (n, offsets, "
     "timestamps, key_validity, key_offsets, keys)"},
    {"json_columns", json_columns, METH_VARARGS,
     "json_columns(body, n, fields) -> [(validity, values, offsets, nulls)] per field, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kafka_records",
    "A Kafka record batch's values joined in C (see kafka_batches.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__kafka_records(void) {
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c_locale == (locale_t)0)
        return PyErr_NoMemory();
    return PyModule_Create(&module);
}
