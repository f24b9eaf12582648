/*
 * Optional compiled accelerator of kproducer's protocol layer: the record encoder and the Produce codec.
 *
 * Everything here has a pure-Python twin that behaves the same (identical bytes, same attributes); the Python
 * modules pick this module when it imported and KPRODUCER_PURE_PYTHON is not set (kproducer/protocol/accel.py).
 * producer/_send.c uses RecordsBuffer, append_one() and murmur2 through the C API table exported here as the
 * capsule _C_API (_records.h). Types:
 *   RecordsBuffer(capacity, buffer=None)
 *                             base class of records.RecordBatchBuilder: the encoded records of one batch,
 *                             written in place into a bytearray (_buf, often a BufferPool buffer) up to a
 *                             write position (_len); try_append(timestamp_ms, key, value, headers) and
 *                             extend(...) encode records (twin: records._RecordsBufferPy)
 * Functions:
 *   murmur2(data) -> int                       (Kafka's murmur2, signed 32-bit; twin: partitioner._murmur2_py)
 *   crc32c(data, crc=0) -> int                 (Castagnoli; SSE4.2 when the CPU has it; twin: crcmod)
 *   extend_columns, column_max_length, bytes_longest, column_partitions
 *                                              (columnar records; twins: columns.py, admission.py, columnar.py)
 *   encode_produce_request, decode_produce_response
 *                                              (the Produce codec's common case; twins: messages/produce.py)
 */
#define KPRODUCER_RECORDS_MODULE
#include "_records.h"

/* ---------------------------------------------------------------------------------------------
 * varints
 */

static inline Py_ssize_t varint_size(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline char *put_varint(char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* A key/value argument: bytes-like or None. */
typedef struct {
    Py_buffer view;
    int present; /* 0: None; 1: a buffer acquired (released by release_blob); 2: a bytes object's own storage */
} blob;

static int get_blob(PyObject *obj, blob *b, const char *what) {
    b->present = 0;
    if (obj == Py_None) return 0;
    if (PyBytes_CheckExact(obj)) { /* (immutable, and the caller holds it while the record is encoded) */
        b->view.buf = PyBytes_AS_STRING(obj);
        b->view.len = PyBytes_GET_SIZE(obj);
        b->present = 2;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None, got %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    b->present = 1;
    return 0;
}

static void release_blob(blob *b) {
    if (b->present == 1) PyBuffer_Release(&b->view);
}

#define MAX_FAST_HEADERS 32

/* One record being encoded: its arguments' buffers (held until release_record) and sizes. */
typedef struct {
    blob key, value;
    PyObject *hseq;
    Py_ssize_t nh, nh_acquired;
    const char *hkey[MAX_FAST_HEADERS];
    Py_ssize_t hklen[MAX_FAST_HEADERS];
    blob hval[MAX_FAST_HEADERS];
    uint64_t body;
    long long offset_delta, ts_delta;
} rec_t;

static void release_record(rec_t *r) {
    for (Py_ssize_t i = 0; i < r->nh_acquired; i++) release_blob(&r->hval[i]);
    Py_XDECREF(r->hseq);
    release_blob(&r->key);
    release_blob(&r->value);
}

/*
 * prepare_record: acquire the record's buffers and size it. Returns the encoded size (length varint
 * included); -1 when the Python encoder must decide (unusual headers); -2 with an exception set. In every
 * case the caller calls release_record(r) afterwards.
 */
static Py_ssize_t prepare_record(rec_t *r, long long offset_delta, long long ts_delta, PyObject *key_obj,
                                 PyObject *value_obj, PyObject *headers) {
    r->hseq = NULL;
    r->nh = r->nh_acquired = 0;
    r->key.present = r->value.present = 0;
    r->offset_delta = offset_delta;
    r->ts_delta = ts_delta;
    if (get_blob(key_obj, &r->key, "key") < 0) return -2;
    if (get_blob(value_obj, &r->value, "value") < 0) return -2;
    if (headers != Py_None) {
        r->hseq = PySequence_Fast(headers, "headers must be a sequence of (str, bytes) pairs");
        if (r->hseq == NULL) return -2;
        r->nh = PySequence_Fast_GET_SIZE(r->hseq);
        if (r->nh > MAX_FAST_HEADERS) return -1; /* rare: let the Python implementation handle it */
    }
    /* body size (everything after the length varint) */
    uint64_t body = 1 /* attributes */ + varint_size(zigzag64(ts_delta)) + varint_size(zigzag64(offset_delta));
    if (r->key.present)
        body += varint_size(zigzag64(r->key.view.len)) + r->key.view.len;
    else
        body += 1;
    if (r->value.present)
        body += varint_size(zigzag64(r->value.view.len)) + r->value.view.len;
    else
        body += 1;
    body += varint_size(zigzag64(r->nh));
    for (Py_ssize_t i = 0; i < r->nh; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(r->hseq, i);
        PyObject *hk, *hv;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
            hk = PyTuple_GET_ITEM(pair, 0);
            hv = PyTuple_GET_ITEM(pair, 1);
        } else {
            return -1; /* unusual shape: the Python path decides */
        }
        if (!PyUnicode_Check(hk)) {
            PyErr_Format(PyExc_TypeError, "header keys must be str, got %.100s", Py_TYPE(hk)->tp_name);
            return -2;
        }
        r->hkey[i] = PyUnicode_AsUTF8AndSize(hk, &r->hklen[i]);
        if (r->hkey[i] == NULL) return -2;
        if (get_blob(hv, &r->hval[i], "header value") < 0) return -2;
        r->nh_acquired = i + 1;
        body += varint_size(zigzag64(r->hklen[i])) + r->hklen[i];
        if (r->hval[i].present)
            body += varint_size(zigzag64(r->hval[i].view.len)) + r->hval[i].view.len;
        else
            body += 1;
    }
    if (body > 0x7FFFFFFF) {
        PyErr_SetString(PyExc_ValueError, "record is larger than 2 GiB");
        return -2;
    }
    r->body = body;
    return (Py_ssize_t)(varint_size(zigzag64((int64_t)body)) + body);
}

/* write_record: the prepared record at p (room for its whole size). */
static void write_record(const rec_t *r, char *p) {
    p = put_varint(p, zigzag64((int64_t)r->body));
    *p++ = 0; /* attributes */
    p = put_varint(p, zigzag64(r->ts_delta));
    p = put_varint(p, zigzag64(r->offset_delta));
    if (r->key.present) {
        p = put_varint(p, zigzag64(r->key.view.len));
        memcpy(p, r->key.view.buf, r->key.view.len);
        p += r->key.view.len;
    } else {
        *p++ = 1; /* zigzag(-1) */
    }
    if (r->value.present) {
        p = put_varint(p, zigzag64(r->value.view.len));
        memcpy(p, r->value.view.buf, r->value.view.len);
        p += r->value.view.len;
    } else {
        *p++ = 1;
    }
    p = put_varint(p, zigzag64(r->nh));
    for (Py_ssize_t i = 0; i < r->nh; i++) {
        p = put_varint(p, zigzag64(r->hklen[i]));
        memcpy(p, r->hkey[i], r->hklen[i]);
        p += r->hklen[i];
        if (r->hval[i].present) {
            p = put_varint(p, zigzag64(r->hval[i].view.len));
            memcpy(p, r->hval[i].view.buf, r->hval[i].view.len);
            p += r->hval[i].view.len;
        } else {
            *p++ = 1;
        }
    }
}

/*
 * do_append: encode one record (length-prefixed) at the end of bytearray buf (growing it).
 * Returns the bytes appended; 0 when limit >= 0 and it would not fit (nothing appended); -1 when the
 * Python encoder must decide (unusual headers); -2 with an exception set.
 * (RecordsBuffer itself writes into its fixed buffer with do_write.)
 */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((unused))
#endif
static Py_ssize_t do_append(PyObject *buf, Py_ssize_t limit, long long offset_delta, long long ts_delta,
                            PyObject *key_obj, PyObject *value_obj, PyObject *headers) {
    rec_t r;
    Py_ssize_t result = prepare_record(&r, offset_delta, ts_delta, key_obj, value_obj, headers);
    if (result > 0) {
        Py_ssize_t total = result;
        Py_ssize_t old = PyByteArray_GET_SIZE(buf);
        if (limit >= 0 && old + total > limit) {
            result = 0;
        } else if (PyByteArray_Resize(buf, old + total) < 0) {
            result = -2;
        } else {
            write_record(&r, PyByteArray_AS_STRING(buf) + old);
        }
    }
    release_record(&r);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * RecordsBuffer: the encoded records of one batch (base class of records.RecordBatchBuilder)
 */


/* RecordsBuffer(capacity, buffer=None): buffer is a bytearray to write into (e.g. one from the BufferPool),
   whatever it holds; None starts with an empty one that grows as records come. */
static int RecordsBuffer_init(RecordsBuffer *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t capacity;
    PyObject *given = Py_None;
    if (!PyArg_ParseTuple(args, "n|O", &capacity, &given)) return -1;
    PyObject *buf;
    if (given == Py_None) {
        buf = PyByteArray_FromStringAndSize(NULL, 0);
        if (buf == NULL) return -1;
    } else if (PyByteArray_CheckExact(given)) {
        buf = Py_NewRef(given);
    } else {
        PyErr_Format(PyExc_TypeError, "RecordsBuffer's buffer must be a bytearray or None, got %.100s",
                     Py_TYPE(given)->tp_name);
        return -1;
    }
    Py_XSETREF(self->buf, buf);
    self->len = 0;
    self->capacity = capacity;
    self->count = 0;
    self->base_ts = -1;
    self->max_ts = -1;
    self->max_rec = 0;
    return 0;
}

static void RecordsBuffer_dealloc(RecordsBuffer *self) {
    PyTypeObject *tp = Py_TYPE(self);
    if (PyType_IS_GC(tp)) PyObject_GC_UnTrack(self);
    Py_CLEAR(self->buf);
    tp->tp_free((PyObject *)self);
}

static PyObject *str_try_append_py;

/*
 * do_write: encode one record (length-prefixed) at the write position of self's buffer, in place. The
 * buffer grows only when the record does not fit in it (a builder's own storage, a record larger than the
 * room left, a batch whose capacity grew): to end at the record, as appending to a bytearray does (CPython
 * over-allocates a growing bytearray). Returns the bytes written; 0 when limit >= 0 and the records would
 * pass it (nothing written); -1 when the Python encoder must decide (unusual headers); -2 with an exception
 * set.
 */
static Py_ssize_t do_write(RecordsBuffer *self, Py_ssize_t limit, long long offset_delta,
                           long long ts_delta, PyObject *key_obj, PyObject *value_obj, PyObject *headers) {
    rec_t r;
    PyObject *buf = self->buf;
    Py_ssize_t pos = self->len;
    Py_ssize_t result = prepare_record(&r, offset_delta, ts_delta, key_obj, value_obj, headers);
    if (result > 0) {
        Py_ssize_t end = pos + result;
        Py_ssize_t size = PyByteArray_GET_SIZE(buf);
        if (limit >= 0 && end > limit) {
            result = 0;
        } else if (pos > size) {
            PyErr_SetString(PyExc_ValueError, "the batch's records were released; nothing can be appended");
            result = -2;
        } else {
            if (end > size && PyByteArray_Resize(buf, end) < 0) result = -2;
            if (result > 0) write_record(&r, PyByteArray_AS_STRING(buf) + pos);
        }
    }
    release_record(&r);
    return result;
}

/*
 * append_one: one record into the buffer, updating count and timestamps.
 * Returns 1 when appended, 0 when it does not fit, -1 with an exception set.
 */
static int append_one(RecordsBuffer *self, PyObject *ts_obj, long long ts, PyObject *key, PyObject *value,
                      PyObject *headers) {
    long long count = self->count;
    Py_ssize_t n;
    Py_ssize_t room = self->capacity - RECORD_BATCH_OVERHEAD;
    if (count) {
        n = do_write(self, room, count, ts - self->base_ts, key, value, headers);
    } else {
        n = do_write(self, -1, 0, 0, key, value, headers);
    }
    if (n == -2) return -1;
    if (n == 0) return 0;
    if (n == -1) {
        /* an unusual record (e.g. many headers): the Python encoder decides, and updates the fields */
        PyObject *stack[5] = {(PyObject *)self, ts_obj, key, value, headers};
        PyObject *r = PyObject_VectorcallMethod(str_try_append_py, stack, 5, NULL);
        if (r == NULL) return -1;
        long d = PyLong_AsLong(r);
        Py_DECREF(r);
        if (d == -1 && PyErr_Occurred()) return -1;
        return d >= 0 ? 1 : 0;
    }
    self->len += n;
    if (n > self->max_rec) self->max_rec = n;
    if (count == 0) {
        self->base_ts = self->max_ts = ts;
    } else if (ts > self->max_ts) {
        self->max_ts = ts;
    }
    self->count = count + 1;
    return 1;
}

static int check_buffer(RecordsBuffer *self) {
    if (self->buf == NULL || !PyByteArray_CheckExact(self->buf)) {
        PyErr_SetString(PyExc_TypeError, "RecordsBuffer._buf must be a bytearray");
        return -1;
    }
    return 0;
}

/* try_append(timestamp_ms, key, value, headers=None) -> offset delta, or -1 when it does not fit */
static PyObject *RecordsBuffer_try_append(RecordsBuffer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "try_append(timestamp_ms, key, value, headers=None)");
        return NULL;
    }
    if (check_buffer(self) < 0) return NULL;
    long long ts = PyLong_AsLongLong(args[0]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    long long count = self->count;
    int r = append_one(self, args[0], ts, args[1], args[2], nargs == 4 ? args[3] : Py_None);
    if (r < 0) return NULL;
    return PyLong_FromLongLong(r ? count : -1);
}

/* seq[i], new reference: a list's item directly (in range, i >= 0), else through the sequence protocol */
static inline PyObject *list_item(PyObject *seq, Py_ssize_t i) {
    if (PyList_CheckExact(seq) && i >= 0 && i < PyList_GET_SIZE(seq)) return Py_NewRef(PyList_GET_ITEM(seq, i));
    return PySequence_GetItem(seq, i);
}

/* a range's start and step */
static int range_start_step(PyObject *range, Py_ssize_t *start, Py_ssize_t *step) {
    PyObject *a = PyObject_GetAttrString(range, "start");
    PyObject *b = a == NULL ? NULL : PyObject_GetAttrString(range, "step");
    if (b != NULL) {
        *start = PyLong_AsSsize_t(a);
        *step = PyLong_AsSsize_t(b);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return b == NULL || PyErr_Occurred() ? -1 : 0;
}

/*
 * extend(timestamp_ms, keys, values, headers, indices, pos) -> next pos
 * Appends records indices[pos], indices[pos+1], ... (positions in keys/values/headers; keys and headers
 * may be None) with one timestamp, until the batch is full or indices run out. Returns the position
 * of the first record not appended.
 */
static PyObject *RecordsBuffer_extend(RecordsBuffer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "extend(timestamp_ms, keys, values, headers, indices, pos)");
        return NULL;
    }
    if (check_buffer(self) < 0) return NULL;
    long long ts = PyLong_AsLongLong(args[0]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    PyObject *keys = args[1], *values = args[2], *headers = args[3], *indices = args[4];
    Py_ssize_t pos = PyLong_AsSsize_t(args[5]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t total = PySequence_Size(indices);
    if (total < 0) return NULL;
    /* a range of indices is read as start + pos * step, lists by index: no object made per record */
    Py_ssize_t rstart = 0, rstep = 0;
    if (PyRange_Check(indices) && range_start_step(indices, &rstart, &rstep) < 0) return NULL;
    while (pos < total) {
        Py_ssize_t i;
        if (rstep != 0) {
            i = rstart + pos * rstep;
        } else {
            PyObject *io = PySequence_GetItem(indices, pos);
            if (io == NULL) return NULL;
            i = PyLong_AsSsize_t(io);
            Py_DECREF(io);
            if (i == -1 && PyErr_Occurred()) return NULL;
        }
        PyObject *value = list_item(values, i);
        PyObject *key = keys == Py_None ? Py_NewRef(Py_None) : list_item(keys, i);
        PyObject *hdrs = headers == Py_None ? Py_NewRef(Py_None) : list_item(headers, i);
        int r = (value == NULL || key == NULL || hdrs == NULL) ? -1 : append_one(self, args[0], ts, key, value, hdrs);
        Py_XDECREF(value);
        Py_XDECREF(key);
        Py_XDECREF(hdrs);
        if (r < 0) return NULL;
        if (r == 0) break;
        pos++;
    }
    return PyLong_FromSsize_t(pos);
}

static uint32_t crc32c_any(uint32_t crc, const unsigned char *p, size_t n); /* (the CRC section below) */

static inline void put_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

/* a producer field of batch_header(): false (no exception) when it is not an int of the field's range */
static int header_field(PyObject *o, long long lo, long long hi, long long *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/*
 * batch_header(attributes, producer_id, producer_epoch, base_sequence) -> bytes: the 61-byte RecordBatch v2
 * header of the records written so far, uncompressed (baseOffset 0, partitionLeaderEpoch -1), CRC included
 * (twin: records._RecordsBufferPy.batch_header). ValueError when a field is out of its range.
 */
static PyObject *RecordsBuffer_batch_header(RecordsBuffer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "batch_header(attributes, producer_id, producer_epoch, base_sequence)");
        return NULL;
    }
    if (check_buffer(self) < 0) return NULL;
    long long attrs = 0, pid = 0, epoch = 0, seq = 0;
    int ok[4] = {header_field(args[0], -32768, 32767, &attrs), header_field(args[1], LLONG_MIN, LLONG_MAX, &pid),
                 header_field(args[2], -32768, 32767, &epoch), header_field(args[3], INT32_MIN, INT32_MAX, &seq)};
    for (int i = 0; i < 4; i++) {
        if (ok[i] < 0) return NULL;
    }
    if (!ok[0] || !ok[1] || !ok[2] || !ok[3] || self->count > INT32_MAX) {
        PyObject *rp = PyObject_Repr(args[1]), *re = PyObject_Repr(args[2]), *rs = PyObject_Repr(args[3]);
        if (rp != NULL && re != NULL && rs != NULL)
            PyErr_Format(PyExc_ValueError,
                         "batch header field out of range (producer_id=%U, producer_epoch=%U, base_sequence=%U, "
                         "records=%lld)", rp, re, rs, (long long)self->count);
        Py_XDECREF(rp);
        Py_XDECREF(re);
        Py_XDECREF(rs);
        return NULL;
    }
    Py_ssize_t len = self->len;
    if (len > PyByteArray_GET_SIZE(self->buf)) {
        PyErr_SetString(PyExc_ValueError, "the batch's records were released");
        return NULL;
    }
    unsigned char h[61];
    put_be(h, 0, 8);                                /* baseOffset */
    put_be(h + 8, (uint64_t)(49 + len), 4);         /* batchLength: from partitionLeaderEpoch on */
    put_be(h + 12, 0xFFFFFFFFu, 4);                 /* partitionLeaderEpoch -1 */
    h[16] = 2;                                      /* magic */
    put_be(h + 21, (uint64_t)attrs, 2);
    put_be(h + 23, (uint64_t)(self->count - 1), 4); /* lastOffsetDelta */
    put_be(h + 27, (uint64_t)self->base_ts, 8);
    put_be(h + 35, (uint64_t)self->max_ts, 8);
    put_be(h + 43, (uint64_t)pid, 8);
    put_be(h + 51, (uint64_t)epoch, 2);
    put_be(h + 53, (uint64_t)seq, 4);
    put_be(h + 57, (uint64_t)self->count, 4);
    uint32_t crc = crc32c_any(0, h + 21, 40);         /* from attributes to the end of the batch */
    crc = crc32c_any(crc, (const unsigned char *)PyByteArray_AS_STRING(self->buf), (size_t)len);
    put_be(h + 17, crc, 4);
    return PyBytes_FromStringAndSize((const char *)h, 61);
}

static PyMethodDef RecordsBuffer_methods[] = {
    {"try_append", (PyCFunction)(void (*)(void))RecordsBuffer_try_append, METH_FASTCALL,
     "Encode one record into the batch; its offset delta, or -1 when the batch is full."},
    {"extend", (PyCFunction)(void (*)(void))RecordsBuffer_extend, METH_FASTCALL,
     "Append records indices[pos:] until the batch is full; returns the next position."},
    {"batch_header", (PyCFunction)(void (*)(void))RecordsBuffer_batch_header, METH_FASTCALL,
     "The 61-byte batch header of the records, uncompressed, with its CRC."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef RecordsBuffer_members[] = {
    {"_buf", T_OBJECT_EX, offsetof(RecordsBuffer, buf), 0, "the storage of the encoded records (bytearray)"},
    {"_len", T_PYSSIZET, offsetof(RecordsBuffer, len), 0, "bytes of encoded records at the start of _buf"},
    {"capacity", T_PYSSIZET, offsetof(RecordsBuffer, capacity), 0, "soft size limit of the batch"},
    {"_count", T_LONGLONG, offsetof(RecordsBuffer, count), 0, "records appended"},
    {"_base_ts", T_LONGLONG, offsetof(RecordsBuffer, base_ts), 0, "first timestamp"},
    {"_max_ts", T_LONGLONG, offsetof(RecordsBuffer, max_ts), 0, "largest timestamp"},
    {"_max_rec", T_PYSSIZET, offsetof(RecordsBuffer, max_rec), 0, "size of the largest record (prefix included)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordsBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._records.RecordsBuffer",
    .tp_basicsize = sizeof(RecordsBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The encoded records of one batch (compiled base of RecordBatchBuilder).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RecordsBuffer_init,
    .tp_dealloc = (destructor)RecordsBuffer_dealloc,
    .tp_methods = RecordsBuffer_methods,
    .tp_members = RecordsBuffer_members,
};
/* ---------------------------------------------------------------------------------------------
 * murmur2 (Kafka's variant, seed 0x9747b28c)
 */

static uint32_t murmur2_raw(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28cU ^ (uint32_t)length;
    Py_ssize_t n4 = length / 4;
    for (Py_ssize_t i = 0; i < n4; i++) {
        const unsigned char *q = data + i * 4;
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = length & ~(Py_ssize_t)3;
    switch (length % 4) {
        case 3:
            h ^= (uint32_t)data[base + 2] << 16;
            /* fall through */
        case 2:
            h ^= (uint32_t)data[base + 1] << 8;
            /* fall through */
        case 1:
            h ^= (uint32_t)data[base];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* Java's toPositive(murmur2(data)) */
static long long murmur2_positive(const unsigned char *data, Py_ssize_t length) {
    return (long long)(murmur2_raw(data, length) & 0x7FFFFFFFU);
}

static PyObject *murmur2(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t h = murmur2_raw((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* ---------------------------------------------------------------------------------------------
 * CRC32C: slicing-by-8 tables, and the SSE4.2 instruction where available
 */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78U : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

static uint32_t crc_soft(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
              crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW_CRC 1

/* The CRC instruction has a latency of 3 cycles and a throughput of 1: three independent streams over
   consecutive thirds of a block keep it busy (about 3x one stream: a 16 KiB batch in ~0.6 us), and are
   combined by "appending zeros" to the first two, a linear map on the 32-bit CRC applied from tables
   (one set per block length; the GF(2) method of zlib's crc32_combine). */
#define CRC_LONG 2048
#define CRC_SHORT 256
static uint32_t crc_zeros_long[4][256], crc_zeros_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* Tables applying `len` zero bytes (a power of two) to a CRC, one table per byte of the CRC. */
static void crc_zeros_init(uint32_t zeros[4][256], size_t len) {
    uint32_t even[32], odd[32], row = 1;
    odd[0] = 0x82F63B78U; /* one zero bit: the reflected Castagnoli polynomial */
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    const uint32_t *op = odd;
    do { /* each squaring doubles the zeros: from one byte (eight bits) up to len bytes */
        gf2_square(even, odd);
        op = even;
        len >>= 1;
        if (len == 0) break;
        gf2_square(odd, even);
        op = odd;
        len >>= 1;
    } while (len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static const unsigned char *crc_hw_blocks(uint64_t *c0, const unsigned char *p,
                                                                            size_t *n, size_t block,
                                                                            uint32_t zeros[4][256]) {
    uint64_t crc0 = *c0;
    while (*n >= 3 * block) {
        uint64_t crc1 = 0, crc2 = 0, w0, w1, w2;
        const unsigned char *end = p + block;
        do {
            memcpy(&w0, p, 8);
            memcpy(&w1, p + block, 8);
            memcpy(&w2, p + 2 * block, 8);
            crc0 = _mm_crc32_u64(crc0, w0);
            crc1 = _mm_crc32_u64(crc1, w1);
            crc2 = _mm_crc32_u64(crc2, w2);
            p += 8;
        } while (p < end);
        crc0 = crc_shift(zeros, (uint32_t)crc0) ^ (uint32_t)crc1;
        crc0 = crc_shift(zeros, (uint32_t)crc0) ^ (uint32_t)crc2;
        p += 2 * block;
        *n -= 3 * block;
    }
    *c0 = crc0;
    return p;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    p = crc_hw_blocks(&c, p, &n, CRC_LONG, crc_zeros_long);
    p = crc_hw_blocks(&c, p, &n, CRC_SHORT, crc_zeros_short);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static int use_hw_crc = 0;

static uint32_t crc32c_any(uint32_t crc, const unsigned char *p, size_t n) {
#ifdef HAVE_HW_CRC
    if (use_hw_crc) return crc_hw(crc, p, n);
#endif
    return crc_soft(crc, p, n);
}

static PyObject *crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    unsigned long start = 0;
    if (nargs == 2) {
        start = PyLong_AsUnsignedLong(args[1]);
        if (start == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    /* Releasing the GIL costs more than it saves for batch-sized buffers: the thread must win the GIL
       back from a busy application thread, which can take a whole switch interval. */
    int release = view.len >= (4 << 20);
    PyThreadState *ts = release ? PyEval_SaveThread() : NULL;
#ifdef HAVE_HW_CRC
    if (use_hw_crc)
        crc = crc_hw((uint32_t)start, (const unsigned char *)view.buf, (size_t)view.len);
    else
#endif
        crc = crc_soft((uint32_t)start, (const unsigned char *)view.buf, (size_t)view.len);
    if (release) PyEval_RestoreThread(ts);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}


/* ---------------------------------------------------------------------------------------------
 * Columnar records: keys and values as Arrow-style binary columns (offsets + data + validity bitmap),
 * encoded by append_one() without a Python bytes object per row (twin: kproducer/protocol/columns.py).
 *
 * A column is the tuple columns.BinaryColumn(offsets, data, validity, offset, length, wide): offsets a buffer
 * of int32 (wide: int64) with length + offset + 1 entries used, data the bytes they index, validity None or a
 * bitmap (bit offset + i set: row i is not null), offset the first row's position in offsets/validity.
 *
 * RowView is one reusable bytes-like object whose buffer is set to a row's bytes before each append_one()
 * call, so that the record encoder (do_append) is reused as it is.
 */

typedef struct {
    PyObject_HEAD
    const char *ptr;
    Py_ssize_t len;
} RowView;

static int RowView_getbuffer(RowView *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->ptr, self->len, 1, flags);
}

static PyBufferProcs RowView_as_buffer = {(getbufferproc)RowView_getbuffer, NULL};

static PyTypeObject RowViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._records.RowView",
    .tp_basicsize = sizeof(RowView),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One row of a binary column (internal).",
    .tp_as_buffer = &RowView_as_buffer,
};

typedef struct {
    Py_buffer offsets, data, validity;
    int has_offsets, has_data, has_validity;
    int wide;
    Py_ssize_t offset, length;
} column;

static void release_column(column *c) {
    if (c->has_offsets) PyBuffer_Release(&c->offsets);
    if (c->has_data) PyBuffer_Release(&c->data);
    if (c->has_validity) PyBuffer_Release(&c->validity);
    c->has_offsets = c->has_data = c->has_validity = 0;
}

static int get_column(PyObject *obj, column *c, const char *what) {
    memset(c, 0, sizeof(*c));
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 6) {
        PyErr_Format(PyExc_TypeError, "%s must be a BinaryColumn(offsets, data, validity, offset, length, wide)",
                     what);
        return -1;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 0), &c->offsets, PyBUF_SIMPLE) < 0) goto fail;
    c->has_offsets = 1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 1), &c->data, PyBUF_SIMPLE) < 0) goto fail;
    c->has_data = 1;
    if (PyTuple_GET_ITEM(obj, 2) != Py_None) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 2), &c->validity, PyBUF_SIMPLE) < 0) goto fail;
        c->has_validity = 1;
    }
    c->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, 3));
    if (c->offset == -1 && PyErr_Occurred()) goto fail;
    c->length = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, 4));
    if (c->length == -1 && PyErr_Occurred()) goto fail;
    c->wide = PyObject_IsTrue(PyTuple_GET_ITEM(obj, 5));
    if (c->wide < 0) goto fail;
    Py_ssize_t width = c->wide ? 8 : 4;
    if (c->offset < 0 || c->length < 0 || (c->offset + c->length + 1) * width > c->offsets.len ||
        (c->has_validity && (c->offset + c->length + 7) / 8 > c->validity.len)) {
        PyErr_Format(PyExc_ValueError, "%s: offsets or validity buffer too short for %zd rows at offset %zd", what,
                     c->length, c->offset);
        goto fail;
    }
    return 0;
fail:
    release_column(c);
    return -1;
}

/* row i of c: 1 and ptr/len set, 0 when null, -1 with an exception (out of range, bad offsets) */
static int column_row(column *c, Py_ssize_t i, const char **ptr, Py_ssize_t *len) {
    if (i < 0 || i >= c->length) {
        PyErr_Format(PyExc_IndexError, "row %zd is not in the column's %zd rows", i, c->length);
        return -1;
    }
    Py_ssize_t j = c->offset + i;
    if (c->has_validity && !((((const unsigned char *)c->validity.buf)[j >> 3] >> (j & 7)) & 1)) return 0;
    long long lo, hi;
    if (c->wide) {
        int64_t a, b;
        memcpy(&a, (const char *)c->offsets.buf + j * 8, 8);
        memcpy(&b, (const char *)c->offsets.buf + j * 8 + 8, 8);
        lo = a;
        hi = b;
    } else {
        int32_t a, b;
        memcpy(&a, (const char *)c->offsets.buf + j * 4, 4);
        memcpy(&b, (const char *)c->offsets.buf + j * 4 + 4, 4);
        lo = a;
        hi = b;
    }
    if (lo < 0 || hi < lo || hi > c->data.len) {
        PyErr_Format(PyExc_ValueError, "row %zd: offsets %lld..%lld outside the data buffer (%zd bytes)", i, lo, hi,
                     c->data.len);
        return -1;
    }
    *ptr = (const char *)c->data.buf + lo;
    *len = (Py_ssize_t)(hi - lo);
    return 1;
}

static RowView *new_row_view(void) {
    if (!(RowViewType.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&RowViewType) < 0) return NULL;
    RowView *v = PyObject_New(RowView, &RowViewType);
    if (v != NULL) {
        v->ptr = "";
        v->len = 0;
    }
    return v;
}

/* Row indices: a range, or a buffer of int32 (e.g. memoryview(...).cast("i")). */
typedef struct {
    Py_buffer view;
    int has_view;
    Py_ssize_t start, step, total;
} row_indices;

static int get_indices(PyObject *obj, row_indices *r) {
    memset(r, 0, sizeof(*r));
    if (PyRange_Check(obj)) {
        if (range_start_step(obj, &r->start, &r->step) < 0) return -1;
        r->total = PyObject_Size(obj);
        return r->total < 0 ? -1 : 0;
    }
    if (PyObject_GetBuffer(obj, &r->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    r->has_view = 1;
    if (r->view.itemsize != 4 || r->view.format == NULL || strchr(r->view.format, 'i') == NULL) {
        PyBuffer_Release(&r->view);
        r->has_view = 0;
        PyErr_SetString(PyExc_TypeError, "indices must be a range or a buffer of int32 (format 'i')");
        return -1;
    }
    r->total = r->view.len / 4;
    return 0;
}

static inline Py_ssize_t index_at(row_indices *r, Py_ssize_t pos) {
    if (r->has_view) {
        int32_t v;
        memcpy(&v, (const char *)r->view.buf + pos * 4, 4);
        return v;
    }
    return r->start + pos * r->step;
}

/*
 * extend_columns(builder, timestamp_ms, keys, values, indices, pos) -> next pos
 * builder.extend() for columns: appends rows indices[pos], indices[pos+1], ... of keys (a BinaryColumn or
 * None) and values (a BinaryColumn), without headers, with one timestamp, until the batch is full.
 */
static PyObject *extend_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "extend_columns(builder, timestamp_ms, keys, values, indices, pos)");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &RecordsBufferType)) {
        PyErr_SetString(PyExc_TypeError, "extend_columns: builder must be a RecordsBuffer");
        return NULL;
    }
    RecordsBuffer *self = (RecordsBuffer *)args[0];
    if (check_buffer(self) < 0) return NULL;
    long long ts = PyLong_AsLongLong(args[1]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[5]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    column keys, values;
    int has_keys = args[2] != Py_None;
    if (has_keys && get_column(args[2], &keys, "keys") < 0) return NULL;
    if (get_column(args[3], &values, "values") < 0) {
        if (has_keys) release_column(&keys);
        return NULL;
    }
    PyObject *result = NULL;
    row_indices rows;
    RowView *kv = NULL, *vv = NULL;
    int have_rows = get_indices(args[4], &rows) == 0;
    if (!have_rows) goto done;
    kv = new_row_view();
    vv = new_row_view();
    if (kv == NULL || vv == NULL) goto done;
    while (pos < rows.total) {
        Py_ssize_t i = index_at(&rows, pos);
        const char *p;
        Py_ssize_t n;
        PyObject *key = Py_None, *value = Py_None;
        if (has_keys) {
            int k = column_row(&keys, i, &p, &n);
            if (k < 0) goto done;
            if (k) {
                kv->ptr = p;
                kv->len = n;
                key = (PyObject *)kv;
            }
        }
        int v = column_row(&values, i, &p, &n);
        if (v < 0) goto done;
        if (v) {
            vv->ptr = p;
            vv->len = n;
            value = (PyObject *)vv;
        }
        int r = append_one(self, args[1], ts, key, value, Py_None);
        if (r < 0) goto done;
        if (r == 0) break;
        pos++;
    }
    result = PyLong_FromSsize_t(pos);
done:
    Py_XDECREF(kv);
    Py_XDECREF(vv);
    if (have_rows && rows.has_view) PyBuffer_Release(&rows.view);
    if (has_keys) release_column(&keys);
    release_column(&values);
    return result;
}

/* column_max_length(column) -> the length of its longest non-null row (0 when none) */
static PyObject *column_max_length(PyObject *module, PyObject *arg) {
    column c;
    if (get_column(arg, &c, "column") < 0) return NULL;
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 0; i < c.length; i++) {
        const char *p;
        Py_ssize_t n;
        int r = column_row(&c, i, &p, &n);
        if (r < 0) {
            release_column(&c);
            return NULL;
        }
        if (r && n > best) best = n;
    }
    release_column(&c);
    return PyLong_FromSsize_t(best);
}


/* bytes_longest(items) -> the length of the longest item when every item is bytes or None (None counts as 0),
 * else -1: send_batch()'s type check and its max.request.size bound in one pass (a list or tuple as it is, any
 * other iterable through a list) */
static PyObject *bytes_longest(PyObject *module, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "bytes_longest() takes a sequence");
    if (seq == NULL) return NULL;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = items[i];
        if (PyBytes_CheckExact(x)) {
            Py_ssize_t len = PyBytes_GET_SIZE(x);
            if (len > best) best = len;
        } else if (x != Py_None) {
            best = -1;
            break;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(best);
}

/*
 * column_partitions(keys, num_partitions) -> ([(partition, int32 row indices as bytes), ...], null rows as bytes)
 * murmur2 of each non-null key (Java's toPositive(murmur2(key)) % num_partitions), rows grouped by partition in
 * order of first appearance, each group's rows in order; the rows with a null key apart (the sticky partitioner's).
 */
static PyObject *column_partitions(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "column_partitions(keys, num_partitions)");
        return NULL;
    }
    Py_ssize_t np = PyLong_AsSsize_t(args[1]);
    if (np == -1 && PyErr_Occurred()) return NULL;
    if (np <= 0) {
        PyErr_SetString(PyExc_ValueError, "num_partitions must be positive");
        return NULL;
    }
    column c;
    if (get_column(args[0], &c, "keys") < 0) return NULL;
    PyObject *result = NULL, *groups = NULL, *nulls = NULL;
    int32_t *part = NULL;
    Py_ssize_t *count = NULL, *fill = NULL, *order = NULL;
    char **dest = NULL;
    part = PyMem_Malloc(sizeof(int32_t) * (c.length ? c.length : 1));
    count = PyMem_Calloc((size_t)np + 1, sizeof(Py_ssize_t));
    fill = PyMem_Calloc((size_t)np + 1, sizeof(Py_ssize_t));
    order = PyMem_Malloc(sizeof(Py_ssize_t) * ((size_t)np + 1));
    dest = PyMem_Calloc((size_t)np + 1, sizeof(char *));
    if (part == NULL || count == NULL || fill == NULL || order == NULL || dest == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t ngroups = 0;
    for (Py_ssize_t i = 0; i < c.length; i++) {
        const char *p;
        Py_ssize_t n;
        int r = column_row(&c, i, &p, &n);
        if (r < 0) goto done;
        Py_ssize_t slot;
        if (r) {
            slot = (Py_ssize_t)((uint32_t)murmur2_positive((const unsigned char *)p, n) % (uint32_t)np);
            if (count[slot] == 0) order[ngroups++] = slot;
        } else {
            slot = np; /* null key */
        }
        part[i] = (int32_t)slot;
        count[slot]++;
    }
    groups = PyList_New(ngroups);
    nulls = PyBytes_FromStringAndSize(NULL, count[np] * 4);
    if (groups == NULL || nulls == NULL) goto done;
    dest[np] = PyBytes_AS_STRING(nulls);
    for (Py_ssize_t g = 0; g < ngroups; g++) {
        Py_ssize_t slot = order[g];
        PyObject *rows = PyBytes_FromStringAndSize(NULL, count[slot] * 4);
        if (rows == NULL) goto done;
        dest[slot] = PyBytes_AS_STRING(rows);
        PyObject *item = Py_BuildValue("(nN)", slot, rows);
        if (item == NULL) goto done;
        PyList_SET_ITEM(groups, g, item);
    }
    for (Py_ssize_t i = 0; i < c.length; i++) {
        int32_t row = (int32_t)i;
        Py_ssize_t slot = part[i];
        memcpy(dest[slot] + fill[slot] * 4, &row, 4);
        fill[slot]++;
    }
    result = Py_BuildValue("(OO)", groups, nulls);
done:
    Py_XDECREF(groups);
    Py_XDECREF(nulls);
    PyMem_Free(part);
    PyMem_Free(count);
    PyMem_Free(fill);
    PyMem_Free(order);
    PyMem_Free(dest);
    release_column(&c);
    return result;
}
/* ---------------------------------------------------------------------------------------------
 * Produce responses (the network thread, once per response): the common case of
 * messages/produce.py's ProduceApi._decode_response_fast (its twin, which it must match dict for dict)
 *
 * decode_produce_response(data, pos, version, part_defaults, mutable, top_defaults) -> dict | None
 *   part_defaults: a partition response's fields besides those read here (copied per partition; the keys in
 *   the tuple ``mutable`` hold a list or dict that is copied too); top_defaults: likewise for the response
 *   (its list/dict values copied). None: not the common case (tagged fields, record errors, long varints,
 *   malformed or truncated data): the caller decodes it the generic way, which also raises the errors.
 */

typedef struct {
    const unsigned char *p;
    Py_ssize_t len, pos;
    int flexible;
} PRReader;

static inline int pr_need(PRReader *r, Py_ssize_t n) { return n >= 0 && r->len - r->pos >= n; }

static inline int64_t pr_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    return (int64_t)v;
}

/* An array count or string length (compact: minus one), as the twin's length(): -2 for "fall back". */
static inline Py_ssize_t pr_length(PRReader *r, int classic_width) {
    if (r->flexible) {
        if (!pr_need(r, 1)) return -2;
        unsigned char b = r->p[r->pos];
        if (b >= 0x80) return -2;
        r->pos += 1;
        return (Py_ssize_t)b - 1;
    }
    if (!pr_need(r, classic_width)) return -2;
    Py_ssize_t n = (Py_ssize_t)pr_be(r->p + r->pos, classic_width);
    r->pos += classic_width;
    return n;
}

static inline int pr_tags(PRReader *r) {
    if (!pr_need(r, 1) || r->p[r->pos] != 0) return -1;
    r->pos += 1;
    return 0;
}

/* A non-null string of n bytes (UTF-8) at the reader's position; NULL with no error set: fall back. */
static PyObject *pr_string(PRReader *r, Py_ssize_t n) {
    if (n < 0 || !pr_need(r, n)) return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p + r->pos, n, NULL);
    if (s == NULL) {
        PyErr_Clear(); /* the generic decoder reports it */
        return NULL;
    }
    r->pos += n;
    return s;
}

static PyObject *copy_container(PyObject *v) {
    if (PyList_Check(v)) return PyList_GetSlice(v, 0, PyList_GET_SIZE(v));
    if (PyDict_Check(v)) return PyDict_Copy(v);
    return Py_NewRef(v);
}

static PyObject *str_pr_index, *str_pr_error_code, *str_pr_base_offset, *str_pr_log_append_time_ms,
    *str_pr_log_start_offset, *str_pr_record_errors, *str_pr_error_message, *str_pr_name,
    *str_pr_partition_responses, *str_pr_responses, *str_pr_throttle_time_ms;

static int pr_set_long(PyObject *d, PyObject *key, int64_t v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int rc = PyDict_SetItem(d, key, o);
    Py_DECREF(o);
    return rc;
}

static int pr_set_steal(PyObject *d, PyObject *key, PyObject *o) {
    if (o == NULL) return -1;
    int rc = PyDict_SetItem(d, key, o);
    Py_DECREF(o);
    return rc;
}

/* One partition response into a new dict; NULL with no error set: fall back (or with an error: raise). */
static PyObject *pr_partition(PRReader *r, int version, PyObject *defaults, PyObject *mutable) {
    Py_ssize_t size = version >= 5 ? 30 : 22; /* >ihqq, >ihqqq */
    if (!pr_need(r, size)) return NULL;
    const unsigned char *q = r->p + r->pos;
    r->pos += size;
    PyObject *d = PyDict_Copy(defaults);
    if (d == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mutable); i++) {
        PyObject *k = PyTuple_GET_ITEM(mutable, i);
        PyObject *v = PyDict_GetItemWithError(d, k);
        if (v == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "partition default missing");
            goto error;
        }
        if (pr_set_steal(d, k, copy_container(v)) < 0) goto error;
    }
    if (pr_set_long(d, str_pr_index, pr_be(q, 4)) < 0 || pr_set_long(d, str_pr_error_code, pr_be(q + 4, 2)) < 0 ||
        pr_set_long(d, str_pr_base_offset, pr_be(q + 6, 8)) < 0 ||
        pr_set_long(d, str_pr_log_append_time_ms, pr_be(q + 14, 8)) < 0)
        goto error;
    if (version >= 5 && pr_set_long(d, str_pr_log_start_offset, pr_be(q + 22, 8)) < 0) goto error;
    if (version >= 8) {
        Py_ssize_t ecount = pr_length(r, 4);
        if (ecount != 0) goto fallback; /* record errors (or unreadable): the generic decoder */
        if (pr_set_steal(d, str_pr_record_errors, PyList_New(0)) < 0) goto error;
        PyObject *msg;
        if (r->flexible) {
            if (!pr_need(r, 1)) goto fallback;
            if (r->p[r->pos] != 0) {
                Py_ssize_t n = pr_length(r, 0);
                if (n < 0) goto fallback;
                msg = pr_string(r, n);
                if (msg == NULL) goto fallback;
            } else {
                r->pos += 1;
                msg = Py_NewRef(Py_None);
            }
        } else {
            if (!pr_need(r, 2)) goto fallback;
            Py_ssize_t n = (Py_ssize_t)pr_be(r->p + r->pos, 2);
            r->pos += 2;
            if (n < 0) {
                if (n != -1) goto fallback;
                msg = Py_NewRef(Py_None);
            } else {
                msg = pr_string(r, n);
                if (msg == NULL) goto fallback;
            }
        }
        if (pr_set_steal(d, str_pr_error_message, msg) < 0) goto error;
        if (r->flexible && pr_tags(r) < 0) goto fallback;
    }
    return d;
fallback:
    Py_DECREF(d);
    return NULL;
error:
    Py_DECREF(d);
    return NULL;
}

static PyObject *decode_produce_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyDict_Check(args[3]) || !PyTuple_Check(args[4]) || !PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_produce_response(data, pos, version, part_defaults: dict, mutable: tuple, "
                        "top_defaults: dict)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    long version = PyLong_AsLong(args[2]);
    if (version == -1 && PyErr_Occurred()) return NULL;
    if (version < 3 || version > 12) Py_RETURN_NONE; /* (v12 is v11 on the wire) */
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PRReader r = {(const unsigned char *)view.buf, view.len, pos, version >= 9};
    PyObject *responses = NULL, *result = NULL;
    if (pos < 0 || pos > view.len) goto fallback;
    Py_ssize_t count = pr_length(&r, 4);
    if (count < 0) goto fallback;
    responses = PyList_New(0);
    if (responses == NULL) goto error;
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t n = pr_length(&r, 2);
        if (n < 0) goto fallback;
        PyObject *name = pr_string(&r, n);
        if (name == NULL) goto fallback;
        Py_ssize_t pcount = pr_length(&r, 4);
        PyObject *parts = pcount >= 0 ? PyList_New(0) : NULL;
        if (parts == NULL) {
            Py_DECREF(name);
            if (PyErr_Occurred()) goto error;
            goto fallback;
        }
        for (Py_ssize_t i = 0; i < pcount; i++) {
            PyObject *d = pr_partition(&r, (int)version, args[3], args[4]);
            if (d == NULL || PyList_Append(parts, d) < 0) {
                Py_XDECREF(d);
                Py_DECREF(name);
                Py_DECREF(parts);
                if (PyErr_Occurred()) goto error;
                goto fallback;
            }
            Py_DECREF(d);
        }
        if (r.flexible && pr_tags(&r) < 0) {
            Py_DECREF(name);
            Py_DECREF(parts);
            goto fallback;
        }
        PyObject *topic = PyDict_New();
        if (topic == NULL || PyDict_SetItem(topic, str_pr_name, name) < 0 ||
            PyDict_SetItem(topic, str_pr_partition_responses, parts) < 0 || PyList_Append(responses, topic) < 0) {
            Py_XDECREF(topic);
            Py_DECREF(name);
            Py_DECREF(parts);
            goto error;
        }
        Py_DECREF(topic);
        Py_DECREF(name);
        Py_DECREF(parts);
    }
    result = PyDict_New();
    if (result == NULL) goto error;
    PyObject *k, *v;
    Py_ssize_t it = 0;
    while (PyDict_Next(args[5], &it, &k, &v)) {
        if (pr_set_steal(result, k, copy_container(v)) < 0) goto error;
    }
    if (PyDict_SetItem(result, str_pr_responses, responses) < 0) goto error;
    if (!pr_need(&r, 4)) goto fallback;
    if (pr_set_long(result, str_pr_throttle_time_ms, pr_be(r.p + r.pos, 4)) < 0) goto error;
    r.pos += 4;
    if (r.flexible && pr_tags(&r) < 0) goto fallback;
    if (r.pos != r.len) goto fallback;
    Py_DECREF(responses);
    PyBuffer_Release(&view);
    return result;
fallback:
    Py_XDECREF(responses);
    Py_XDECREF(result);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(responses);
    Py_XDECREF(result);
    PyBuffer_Release(&view);
    return NULL;
}

static int produce_response_module_init(void) {
#define PR_INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return -1
    PR_INTERN(str_pr_index, "index");
    PR_INTERN(str_pr_error_code, "error_code");
    PR_INTERN(str_pr_base_offset, "base_offset");
    PR_INTERN(str_pr_log_append_time_ms, "log_append_time_ms");
    PR_INTERN(str_pr_log_start_offset, "log_start_offset");
    PR_INTERN(str_pr_record_errors, "record_errors");
    PR_INTERN(str_pr_error_message, "error_message");
    PR_INTERN(str_pr_name, "name");
    PR_INTERN(str_pr_partition_responses, "partition_responses");
    PR_INTERN(str_pr_responses, "responses");
    PR_INTERN(str_pr_throttle_time_ms, "throttle_time_ms");
#undef PR_INTERN
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Produce requests (the network thread, once per request): messages/produce.py's
 * ProduceApi._encode_request_parts (its twin: the same bytes once joined, the same cases handed back)
 *
 * encode_produce_request(version, body) -> list | None
 *   the request body as buffers to be joined or written in order: the fields in a few bytes objects, each
 *   batch's records (a memoryview, or bytes of more than PQ_INLINE bytes) as it is, not copied. None: not the
 *   fast path's case (the caller uses the schema codec, which also raises the errors).
 */

#define PQ_INLINE 512

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    PyObject *parts;
} PQWriter;

static int pq_put(PQWriter *w, const void *data, Py_ssize_t n) {
    if (w->len + n > w->cap) {
        Py_ssize_t cap = (w->cap ? w->cap * 2 : 256);
        while (cap < w->len + n) cap *= 2;
        char *grown = PyMem_Realloc(w->buf, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->buf = grown;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, data, (size_t)n);
    w->len += n;
    return 0;
}

static int pq_flush(PQWriter *w) {
    if (w->len == 0) return 0;
    PyObject *b = PyBytes_FromStringAndSize(w->buf, w->len);
    if (b == NULL) return -1;
    int rc = PyList_Append(w->parts, b);
    Py_DECREF(b);
    w->len = 0;
    return rc;
}

static int pq_be(PQWriter *w, int64_t v, int n) {
    unsigned char b[8];
    put_be(b, (uint64_t)v, n);
    return pq_put(w, b, n);
}

static int pq_uvarint(PQWriter *w, uint64_t v) {
    char b[10];
    char *end = put_varint(b, v);
    return pq_put(w, b, end - b);
}

/* An array's element count (compact: plus one). */
static int pq_count(PQWriter *w, Py_ssize_t n, int flexible) {
    return flexible ? pq_uvarint(w, (uint64_t)n + 1) : pq_be(w, n, 4);
}

/* A non-null string: its length prefix and UTF-8 bytes. 1: fall back (a classic string over 32767 bytes). */
static int pq_string(PQWriter *w, PyObject *str, int flexible) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(str, &n);
    if (u == NULL) {
        PyErr_Clear(); /* (e.g. lone surrogates) the schema codec reports it */
        return 1;
    }
    if (flexible) {
        if (pq_uvarint(w, (uint64_t)n + 1) < 0) return -1;
    } else {
        if (n > 32767) return 1;
        if (pq_be(w, n, 2) < 0) return -1;
    }
    return pq_put(w, u, n);
}

/* A piece of a batch: copied when small bytes, else its own part. 1: fall back (not bytes-like as expected). */
static int pq_piece(PQWriter *w, PyObject *piece) {
    if (PyBytes_CheckExact(piece) && PyBytes_GET_SIZE(piece) <= PQ_INLINE)
        return pq_put(w, PyBytes_AS_STRING(piece), PyBytes_GET_SIZE(piece));
    if (pq_flush(w) < 0) return -1;
    return PyList_Append(w->parts, piece);
}

/* The byte length of a records piece as the twin counts it; -1: fall back. */
static Py_ssize_t pq_piece_size(PyObject *piece) {
    if (PyMemoryView_Check(piece) && Py_IS_TYPE(piece, &PyMemoryView_Type))
        return PyMemoryView_GET_BUFFER(piece)->len;
    if (PyBytes_CheckExact(piece)) return PyBytes_GET_SIZE(piece);
    if (PyByteArray_CheckExact(piece)) return PyByteArray_GET_SIZE(piece);
    return -1;
}

/* 0: encoded, 1: fall back, -1: error. */
static int pq_body(PQWriter *w, long version, PyObject *body) {
    int flexible = version >= 9;
    if (!PyDict_CheckExact(body) || PyDict_GET_SIZE(body) != 4) return 1;
    PyObject *tid = PyDict_GetItemString(body, "transactional_id");
    PyObject *acks = PyDict_GetItemString(body, "acks");
    PyObject *timeout = PyDict_GetItemString(body, "timeout_ms");
    PyObject *topics = PyDict_GetItemString(body, "topic_data");
    if (acks == NULL || timeout == NULL || topics == NULL || !PyLong_CheckExact(acks) ||
        !PyLong_CheckExact(timeout) || !PyList_CheckExact(topics))
        return 1;
    int overflow;
    long long a = PyLong_AsLongLongAndOverflow(acks, &overflow);
    if (overflow || a < -32768 || a > 32767) return 1;
    long long t = PyLong_AsLongLongAndOverflow(timeout, &overflow);
    if (overflow || t < -2147483648LL || t > 2147483647LL) return 1;
    if (tid == NULL || tid == Py_None) {
        if (pq_put(w, flexible ? "\x00" : "\xff\xff", flexible ? 1 : 2) < 0) return -1;
    } else if (PyUnicode_CheckExact(tid)) {
        int rc = pq_string(w, tid, flexible);
        if (rc) return rc;
    } else {
        return 1;
    }
    if (pq_be(w, a, 2) < 0 || pq_be(w, t, 4) < 0) return -1;
    Py_ssize_t ntopics = PyList_GET_SIZE(topics);
    if (pq_count(w, ntopics, flexible) < 0) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(topics); i++) {
        PyObject *topic = PyList_GET_ITEM(topics, i);
        if (!PyDict_CheckExact(topic) || PyDict_GET_SIZE(topic) != 2) return 1;
        PyObject *name = PyDict_GetItemString(topic, "name");
        PyObject *partitions = PyDict_GetItemString(topic, "partition_data");
        if (name == NULL || partitions == NULL || !PyUnicode_CheckExact(name) || !PyList_CheckExact(partitions))
            return 1;
        int rc = pq_string(w, name, flexible);
        if (rc) return rc;
        Py_ssize_t nparts = PyList_GET_SIZE(partitions);
        if (pq_count(w, nparts, flexible) < 0) return -1;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(partitions); j++) {
            PyObject *part = PyList_GET_ITEM(partitions, j);
            if (!PyDict_CheckExact(part) || PyDict_GET_SIZE(part) != 2) return 1;
            PyObject *index = PyDict_GetItemString(part, "index");
            PyObject *records = PyDict_GetItemString(part, "records");
            if (index == NULL || !PyLong_CheckExact(index)) return 1;
            long long idx = PyLong_AsLongLongAndOverflow(index, &overflow);
            if (overflow || idx < -2147483648LL || idx > 2147483647LL) return 1;
            if (pq_be(w, idx, 4) < 0) return -1;
            if (records == NULL || records == Py_None) {
                if (pq_put(w, flexible ? "\x00" : "\xff\xff\xff\xff", flexible ? 1 : 4) < 0) return -1;
            } else {
                PyObject *pieces = PyTuple_CheckExact(records) ? records : NULL;
                Py_ssize_t npieces = pieces != NULL ? PyTuple_GET_SIZE(pieces) : 1;
                Py_ssize_t total = 0;
                for (Py_ssize_t k = 0; k < npieces; k++) {
                    Py_ssize_t n = pq_piece_size(pieces != NULL ? PyTuple_GET_ITEM(pieces, k) : records);
                    if (n < 0) return 1;
                    total += n;
                }
                if (flexible) {
                    if (pq_uvarint(w, (uint64_t)total + 1) < 0) return -1;
                } else {
                    if (total > 2147483647LL) return 1;
                    if (pq_be(w, total, 4) < 0) return -1;
                }
                for (Py_ssize_t k = 0; k < npieces; k++)
                    if (pq_piece(w, pieces != NULL ? PyTuple_GET_ITEM(pieces, k) : records) < 0) return -1;
            }
            if (flexible && pq_put(w, "\x00", 1) < 0) return -1;
        }
        if (flexible && pq_put(w, "\x00", 1) < 0) return -1;
    }
    if (flexible && pq_put(w, "\x00", 1) < 0) return -1;
    return 0;
}

static PyObject *encode_produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_produce_request(version, body)");
        return NULL;
    }
    long version = PyLong_AsLong(args[0]);
    if (version == -1 && PyErr_Occurred()) return NULL;
    if (version < 3 || version > 12) Py_RETURN_NONE; /* (v12 is v11 on the wire) */
    PQWriter w = {NULL, 0, 0, PyList_New(0)};
    if (w.parts == NULL) return NULL;
    int rc = pq_body(&w, version, args[1]);
    if (rc == 0) rc = pq_flush(&w);
    PyMem_Free(w.buf);
    if (rc < 0) {
        Py_DECREF(w.parts);
        return NULL;
    }
    if (rc > 0) {
        Py_DECREF(w.parts);
        Py_RETURN_NONE;
    }
    return w.parts;
}
static PyMethodDef methods[] = {
    {"murmur2", murmur2, METH_O, "Kafka's murmur2 hash of a bytes-like object (signed 32-bit)."},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_FASTCALL, "CRC32C (Castagnoli) of data."},
    {"encode_produce_request", (PyCFunction)(void (*)(void))encode_produce_request, METH_FASTCALL,
     "A Produce request body as buffers (as ProduceApi._encode_request_parts, the same bytes); None otherwise."},
    {"decode_produce_response", (PyCFunction)(void (*)(void))decode_produce_response, METH_FASTCALL,
     "A Produce response body in its common case (as ProduceApi._decode_response_fast); None otherwise."},
    {"extend_columns", (PyCFunction)(void (*)(void))extend_columns, METH_FASTCALL,
     "Append rows of binary columns to a batch until it is full; returns the next position."},
    {"column_max_length", column_max_length, METH_O, "Length of the longest non-null row of a binary column."},
    {"bytes_longest", bytes_longest, METH_O,
     "Length of the longest item of a sequence of bytes or None; -1 if another type is there."},
    {"column_partitions", (PyCFunction)(void (*)(void))column_partitions, METH_FASTCALL,
     "Rows of a key column grouped by murmur2 partition, and the rows with a null key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "Compiled record encoder and Produce codec of kproducer (optional).", -1,
    methods,
};

/* the C API of this module for producer/_send.c (see _records.h) */
static KPRecordsAPI records_api = {
    KP_RECORDS_API_VERSION, &RecordsBufferType, check_buffer, append_one, murmur2_positive,
};

PyMODINIT_FUNC PyInit__records(void) {
    crc_init();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    crc_zeros_init(crc_zeros_long, CRC_LONG);
    crc_zeros_init(crc_zeros_short, CRC_SHORT);
#endif
    str_try_append_py = PyUnicode_InternFromString("_try_append_py");
    if (str_try_append_py == NULL) return NULL;
    if (PyType_Ready(&RecordsBufferType) < 0 || produce_response_module_init() < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddType(mod, &RecordsBufferType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(&records_api, KP_RECORDS_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(mod, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(mod);
        return NULL;
    }
    if (PyModule_AddIntConstant(mod, "HW_CRC32C", use_hw_crc) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
