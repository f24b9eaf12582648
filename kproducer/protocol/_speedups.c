/*
 * Optional compiled accelerator for kproducer's per-record hot path.
 *
 * Everything here has a pure-Python twin that behaves the same (identical bytes, same attributes); the
 * Python modules pick this module when it imported and KPRODUCER_PURE_PYTHON is not set
 * (kproducer/protocol/accel.py). Types:
 *   RecordsBuffer(capacity, buffer=None)
 *                             base class of records.RecordBatchBuilder: the encoded records of one batch,
 *                             written in place into a bytearray (_buf, often a BufferPool buffer) up to a
 *                             write position (_len); try_append(timestamp_ms, key, value, headers) and
 *                             extend(...) encode records (twin: records._RecordsBufferPy)
 *   FutureBase(...)           base class of future.FutureRecordMetadata: the per-record fields
 *                             (twin: future._FutureFieldsPy)
 *   FastSend(...)             a Producer's ``_fast``: what send()'s compiled common case reads
 *   SendMethod(func)          the class attribute Producer.send: its plain calls run the producer's FastSend,
 *                             every other call the Python send() (twin: that Python send() alone)
 * Functions:
 *   murmur2(data) -> int                       (Kafka's murmur2, signed 32-bit; twin: partitioner._murmur2_py)
 *   crc32c(data, crc=0) -> int                 (Castagnoli; SSE4.2 when the CPU has it; twin: crcmod)
 *   epoll_wait_io, sendmsg_nogil, recv_into_nogil
 *                                              (Linux: the network thread's socket I/O, giving the GIL up only
 *                                              to wait; twins: selectors and the socket methods)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o) {
    Py_INCREF(o);
    return o;
}
#endif

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

#define RECORD_BATCH_OVERHEAD 61

typedef struct {
    PyObject_HEAD
    PyObject *buf; /* bytearray: the storage, written from its start; its length is the room, not the records */
    Py_ssize_t len; /* bytes of encoded records in buf (the write position) */
    Py_ssize_t capacity;
    long long count;
    long long base_ts;
    long long max_ts;
    Py_ssize_t max_rec; /* the largest record written (length prefix included), for record-size-avg/max */
} RecordsBuffer;

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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.RecordsBuffer",
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
 * FutureBase: the fields of a per-record future (base class of future.FutureRecordMetadata)
 */

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    long long delta;
    long long timestamp;
    long long key_size;
    long long value_size;
} FutureBase;

static int FutureBase_init(FutureBase *self, PyObject *args, PyObject *kwds) {
    PyObject *batch;
    long long delta, ts, ks, vs;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "FutureRecordMetadata takes positional arguments only");
        return -1;
    }
    if (PyTuple_GET_SIZE(args) != 5) {
        PyErr_SetString(PyExc_TypeError, "FutureRecordMetadata(batch, delta, timestamp, key_size, value_size)");
        return -1;
    }
    batch = PyTuple_GET_ITEM(args, 0);
    delta = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 1));
    ts = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 2));
    ks = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 3));
    vs = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 4));
    if (PyErr_Occurred()) return -1;
    Py_INCREF(batch);
    Py_XSETREF(self->batch, batch);
    self->delta = delta;
    self->timestamp = ts;
    self->key_size = ks;
    self->value_size = vs;
    return 0;
}

static int FutureBase_traverse(FutureBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->batch);
    return 0;
}

static int FutureBase_clear(FutureBase *self) {
    Py_CLEAR(self->batch);
    return 0;
}

static void FutureBase_dealloc(FutureBase *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->batch);
    tp->tp_free((PyObject *)self);
}

static PyMemberDef FutureBase_members[] = {
    {"_batch", T_OBJECT, offsetof(FutureBase, batch), 0, "the batch holding the record"},
    {"_delta", T_LONGLONG, offsetof(FutureBase, delta), 0, "offset delta in the batch"},
    {"timestamp", T_LONGLONG, offsetof(FutureBase, timestamp), 0, "record timestamp (ms)"},
    {"key_size", T_LONGLONG, offsetof(FutureBase, key_size), 0, "serialized key size (-1: null)"},
    {"value_size", T_LONGLONG, offsetof(FutureBase, value_size), 0, "serialized value size (-1: null)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FutureBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.FutureBase",
    .tp_basicsize = sizeof(FutureBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Fields of a per-record future (compiled base of FutureRecordMetadata).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FutureBase_init,
    .tp_dealloc = (destructor)FutureBase_dealloc,
    .tp_traverse = (traverseproc)FutureBase_traverse,
    .tp_clear = (inquiry)FutureBase_clear,
    .tp_members = FutureBase_members,
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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.RowView",
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
 * The network thread's socket I/O without giving up the GIL (Linux)
 *
 * A thread that gives up the GIL for a system call must win it back afterwards. While the application's thread
 * runs Python (a send() loop), the returning thread may wait up to a switch interval (5 ms by default,
 * sys.setswitchinterval: the application's setting) before CPython makes the other thread let go, and every
 * such hand-over costs a futex wake and a context switch. The socket module gives the GIL up around every
 * call, even on a non-blocking socket that never waits. So the producer's network thread, on plain sockets:
 *   - writes and reads with sendmsg_nogil() and recv_into_nogil(), holding the GIL (they never wait);
 *   - polls with epoll_wait_io(), which gives the GIL up only to wait (a timeout other than 0).
 * Measured in four A/B runs (200k x 100 B on tansu, 6-14 alternated trials each): send() msg/s +7 % (median
 * of the runs' medians; -3 % to +12 %), its CPU per record -0 to -5 %; send_batch() unchanged within the noise.
 * (Handing the GIL to the network thread as soon as it wakes was tried too: it sent requests sooner and
 * smaller, 2.5x as many, at about twice the CPU per record, and was dropped.)
 * TLS sockets keep the ssl module's calls.
 */
#if defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#define HAVE_NET_IO 1
#define NET_MAX_IOV 512

static int as_fd(PyObject *o, int *out) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* epoll_wait_io(epfd, timeout_ms, maxevents) -> [(fd, selectors mask)]: select.epoll.poll() and selectors'
   mapping of its events (EVENT_READ 1, EVENT_WRITE 2) in one call; the GIL is given up only for a wait
   (timeout_ms > 0, or < 0: forever; rounded up to whole milliseconds, as selectors does). */
static PyObject *epoll_wait_io(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "epoll_wait_io(epfd, timeout_ms, maxevents)");
        return NULL;
    }
    int epfd;
    if (as_fd(args[0], &epfd) < 0) return NULL;
    double timeout = PyFloat_AsDouble(args[1]);
    if (timeout == -1.0 && PyErr_Occurred()) return NULL;
    Py_ssize_t maxevents = PyLong_AsSsize_t(args[2]);
    if (maxevents == -1 && PyErr_Occurred()) return NULL;
    if (maxevents < 1 || maxevents > 4096) {
        PyErr_SetString(PyExc_ValueError, "maxevents must be 1..4096");
        return NULL;
    }
    int ms;
    if (timeout != timeout) ms = 0; /* (NaN: do not wait) */
    else if (timeout < 0) ms = -1;
    else if (timeout >= (double)INT_MAX) ms = INT_MAX;
    else {
        ms = (int)timeout;
        if ((double)ms < timeout) ms++; /* (rounded up, as selectors does: never wake before the time) */
    }
    struct epoll_event evs[64];
    struct epoll_event *ev = evs;
    if (maxevents > 64) {
        ev = PyMem_Malloc(sizeof(struct epoll_event) * (size_t)maxevents);
        if (ev == NULL) return PyErr_NoMemory();
    }
    int n;
    for (;;) {
        if (ms == 0) {
            n = epoll_wait(epfd, ev, (int)maxevents, 0);
        } else {
            Py_BEGIN_ALLOW_THREADS
            n = epoll_wait(epfd, ev, (int)maxevents, ms);
            Py_END_ALLOW_THREADS
        }
        if (n >= 0) break;
        if (errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            if (ev != evs) PyMem_Free(ev);
            return NULL;
        }
        if (PyErr_CheckSignals() < 0) {
            if (ev != evs) PyMem_Free(ev);
            return NULL;
        }
        ms = 0; /* interrupted: look once more without waiting (the caller polls again) */
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        if (ev != evs) PyMem_Free(ev);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        uint32_t e = ev[i].events;
        long mask = 0;
        if (e & ~(uint32_t)EPOLLIN) mask |= 2;  /* as selectors.EpollSelector: anything but EPOLLIN wakes writers */
        if (e & ~(uint32_t)EPOLLOUT) mask |= 1; /* and anything but EPOLLOUT wakes readers */
        PyObject *item = Py_BuildValue("(il)", ev[i].data.fd, mask);
        if (item == NULL) {
            Py_DECREF(out);
            if (ev != evs) PyMem_Free(ev);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    if (ev != evs) PyMem_Free(ev);
    return out;
}

/* sendmsg_nogil(fd, buffers) -> bytes written: one sendmsg() of the buffers in order without giving up the
   GIL (the socket is non-blocking); BlockingIOError when the socket takes nothing now, OSError otherwise. */
static PyObject *sendmsg_nogil(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "sendmsg_nogil(fd, list of buffers)");
        return NULL;
    }
    int fd;
    if (as_fd(args[0], &fd) < 0) return NULL;
    PyObject *parts = args[1];
    Py_ssize_t count = PyList_GET_SIZE(parts);
    if (count > NET_MAX_IOV) count = NET_MAX_IOV; /* (the rest goes in the next call: a partial write) */
    struct iovec iov[NET_MAX_IOV];
    Py_buffer views[NET_MAX_IOV];
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    for (; got < count; got++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        iov[got].iov_base = views[got].buf;
        iov[got].iov_len = (size_t)views[got].len;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)count;
    ssize_t n;
    do {
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) PyErr_SetFromErrno(PyExc_OSError);
    else result = PyLong_FromSsize_t(n);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return result;
}

/* recv_into_nogil(fd, buffer) -> bytes read (0: the peer closed): one recv() without giving up the GIL (the
   socket is non-blocking); BlockingIOError when there is nothing to read, OSError otherwise. */
static PyObject *recv_into_nogil(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "recv_into_nogil(fd, buffer)");
        return NULL;
    }
    int fd;
    if (as_fd(args[0], &fd) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) return NULL;
    ssize_t n;
    do {
        n = recv(fd, view.buf, (size_t)view.len, 0);
    } while (n < 0 && errno == EINTR);
    PyBuffer_Release(&view);
    if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromSsize_t(n);
}
#endif

/* ---------------------------------------------------------------------------------------------
 * FastSend and SendMethod: Producer.send()'s common case in compiled code
 *
 * FastSend(...) holds what send() reads (built by Producer.__init__ as its ``_fast`` when the producer's
 * settings allow the fast path); SendMethod(func) is the class attribute Producer.send: a method descriptor
 * (called without a bound-method object, as a def would be) that runs the plain case of a record through
 * the producer's FastSend and hands every other call, unchanged, to ``func`` (the Python send(), the one
 * implementation of the rules). The plain case: an open producer without a fatal error, a str topic whose
 * partition count is known and was touched within the last second, bytes/None key and value, no headers,
 * a valid or no explicit partition and timestamp, a record within max.request.size, and room for it in
 * the partition's last open batch. Nothing is changed before the record is known to take this path,
 * except the key-hash cache (as key_hash_miss does); anything else falls back before any effect.
 */

typedef struct {
    PyObject_HEAD
    PyObject *sender;        /* .fatal_error */
    PyObject *metadata;      /* .cluster (replaced on updates: read each call) */
    PyObject *accumulator;   /* ._closed */
    PyObject *batches;       /* the accumulator's {(topic, partition): deque of ProducerBatch} */
    PyObject *lock;          /* the accumulator's lock, and its bound methods */
    PyObject *acquire;
    PyObject *release;
    int lock_direct;         /* a CPython _thread.lock whose layout was checked: see fs_lock() */
    PyObject *hash_cache;    /* {key: positive murmur2} */
    PyObject *sticky;        /* StickyPartitioner (next_partition, limit) */
    PyObject *sticky_state;  /* its state: {topic: [partition, bytes, limit]} */
    PyObject *topic_touched; /* the producer's {topic: monotonic ms of the last add_topic} */
    PyTypeObject *future_type;
    PyTypeObject *batch_type;
    PyObject *monotonic_ms;  /* None: the system clock, read here */
    PyObject *wall_ms;
    Py_ssize_t off_closed, off_builder, off_thunks; /* ProducerBatch slots */
    long long max_request_size;
    long long record_overhead;
    long long bound_extra;
    Py_ssize_t hash_cache_size;
    double touch_ms;
    int ignore_keys;
    long long hits; /* records queued by the fast path */
    PyObject *gate;          /* bytearray: gate[0] != 0 while the producer is open, has no fatal error and its
                                accumulator takes records; whichever of them closes clears it (one byte read
                                here instead of three attribute lookups per record) */
    PyObject *last_cluster;  /* the cluster seen last, and its partition_counts (a cluster is immutable) */
    PyObject *last_counts;
    PyObject *tp_cache;      /* {topic: ((topic, 0), (topic, 1), ...)}: the batches' keys, made once */
    PyObject *callback_codes; /* future.CALLBACK_CODES: the ids of the code objects of the functions (-id: of
                                 bound methods' functions) known to take (metadata, exception); None: any */
    PyObject *last_code;      /* the code object last found there (held: its address is not reused) */
    int last_code_method;     /* ... of a bound method's function */
} FastSend;

static PyObject *str_cluster, *str_partition_counts, *str_available,
    *str_next_partition, *str_limit, *str_fast, *str___call__;
static PyObject *send_kwnames[7];

static int slot_offset(PyTypeObject *tp, const char *name, Py_ssize_t *off) {
    PyObject *d = PyObject_GetAttrString((PyObject *)tp, name);
    if (d == NULL) return -1;
    if (Py_TYPE(d) != &PyMemberDescr_Type || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        Py_DECREF(d);
        PyErr_Format(PyExc_TypeError, "%s.%s must be a slot", tp->tp_name, name);
        return -1;
    }
    *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

static void FastSend_dealloc(FastSend *self) {
    Py_CLEAR(self->sender);
    Py_CLEAR(self->metadata);
    Py_CLEAR(self->accumulator);
    Py_CLEAR(self->batches);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->hash_cache);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->sticky_state);
    Py_CLEAR(self->topic_touched);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->batch_type);
    Py_CLEAR(self->monotonic_ms);
    Py_CLEAR(self->wall_ms);
    Py_CLEAR(self->last_cluster);
    Py_CLEAR(self->last_counts);
    Py_CLEAR(self->tp_cache);
    Py_CLEAR(self->gate);
    Py_CLEAR(self->callback_codes);
    Py_CLEAR(self->last_code);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/*
 * The accumulator's lock. A Python-level acquire() + release() cost ~90 ns, a fifth of the fast path: a free
 * CPython _thread.lock (3.9-3.12, whose layout is mirrored here and checked when a FastSend is made) is taken
 * and released directly, with the same effect on the lock object as its acquire(False) / release(); a lock
 * held by another thread is waited for through acquire() (which lets other threads run meanwhile).
 */
#if PY_VERSION_HEX < 0x030D0000
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock_lock;
    PyObject *in_weakreflist;
    char locked;
} thread_lock_mirror;
#define HAVE_LOCK_MIRROR 1

static int call_bool(PyObject *obj, const char *method, PyObject *arg) {
    PyObject *r = arg == NULL ? PyObject_CallMethod(obj, method, NULL) : PyObject_CallMethod(obj, method, "O", arg);
    if (r == NULL) return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}
#endif

/* 1: the lock may be used directly; 0: through its methods; -1: error */
static int lock_layout_ok(PyObject *lock) {
#ifdef HAVE_LOCK_MIRROR
    if (strcmp(Py_TYPE(lock)->tp_name, "_thread.lock") != 0 ||
        Py_TYPE(lock)->tp_basicsize != (Py_ssize_t)sizeof(thread_lock_mirror))
        return 0;
    /* the lock is new and free (nothing else has it yet): check the mirror against its own methods */
    int locked = call_bool(lock, "locked", NULL);
    if (locked != 0) return locked < 0 ? -1 : 0;
    thread_lock_mirror *m = (thread_lock_mirror *)lock;
    if (!PyThread_acquire_lock(m->lock_lock, NOWAIT_LOCK)) return 0;
    int got = call_bool(lock, "acquire", Py_False); /* taken here: acquire(False) must fail */
    int ok = got == 0;
    if (ok) {
        m->locked = 1;
        ok = call_bool(lock, "locked", NULL) == 1;
        m->locked = 0;
    }
    PyThread_release_lock(m->lock_lock);
    if (got == 1) { /* (not the layout we know: undo what acquire() did) */
        PyObject *r = PyObject_CallMethod(lock, "release", NULL);
        Py_XDECREF(r);
    }
    if (ok) { /* and its own methods see it free again */
        ok = call_bool(lock, "acquire", Py_False) == 1 && call_bool(lock, "locked", NULL) == 1;
        PyObject *r = ok ? PyObject_CallMethod(lock, "release", NULL) : NULL;
        Py_XDECREF(r);
        ok = ok && r != NULL && call_bool(lock, "locked", NULL) == 0;
    }
    if (PyErr_Occurred()) return -1;
    return ok;
#else
    return 0;
#endif
}

static int fs_lock(FastSend *fs) {
#ifdef HAVE_LOCK_MIRROR
    if (fs->lock_direct) {
        thread_lock_mirror *m = (thread_lock_mirror *)fs->lock;
        if (PyThread_acquire_lock(m->lock_lock, NOWAIT_LOCK)) {
            m->locked = 1;
            return 0;
        }
    }
#endif
    PyObject *r = PyObject_CallNoArgs(fs->acquire);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int fs_unlock(FastSend *fs) {
#ifdef HAVE_LOCK_MIRROR
    if (fs->lock_direct) {
        thread_lock_mirror *m = (thread_lock_mirror *)fs->lock;
        m->locked = 0;
        PyThread_release_lock(m->lock_lock);
        return 0;
    }
#endif
    PyObject *r = PyObject_CallNoArgs(fs->release);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int FastSend_init(FastSend *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sender", "metadata", "accumulator", "batches", "lock", "hash_cache", "sticky",
                             "topic_touched", "future_type", "batch_type", "monotonic_ms", "wall_ms",
                             "max_request_size", "record_overhead", "bound_extra", "hash_cache_size",
                             "touch_ms", "ignore_keys", "gate", "callback_codes", NULL};
    PyObject *sender, *metadata, *accumulator, *batches, *lock, *hash_cache, *sticky, *topic_touched,
        *monotonic_ms, *wall_ms, *gate, *callback_codes = Py_None;
    PyTypeObject *future_type, *batch_type;
    long long max_request_size, record_overhead, bound_extra;
    Py_ssize_t hash_cache_size;
    double touch_ms;
    int ignore_keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOO!OO!OO!O!O!OOLLLndpO!O", kwlist, &sender, &metadata,
                                     &accumulator, &PyDict_Type, &batches, &lock, &PyDict_Type, &hash_cache,
                                     &sticky, &PyDict_Type, &topic_touched, &PyType_Type, &future_type,
                                     &PyType_Type, &batch_type, &monotonic_ms, &wall_ms, &max_request_size,
                                     &record_overhead, &bound_extra, &hash_cache_size, &touch_ms, &ignore_keys,
                                     &PyByteArray_Type, &gate, &callback_codes))
        return -1;
    if (callback_codes != Py_None && !PyDict_CheckExact(callback_codes)) {
        PyErr_SetString(PyExc_TypeError, "callback_codes must be a dict or None");
        return -1;
    }
    if (PyByteArray_GET_SIZE(gate) != 1) {
        PyErr_SetString(PyExc_ValueError, "gate must be a bytearray of one byte");
        return -1;
    }
    if (!PyType_IsSubtype(future_type, &FutureBaseType) || future_type->tp_basicsize != sizeof(FutureBase) ||
        future_type->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "future_type must be a slot-less subclass of FutureBase");
        return -1;
    }
    if (slot_offset(batch_type, "closed", &self->off_closed) < 0 ||
        slot_offset(batch_type, "builder", &self->off_builder) < 0 ||
        slot_offset(batch_type, "thunks", &self->off_thunks) < 0)
        return -1;
    PyObject *state = PyObject_GetAttrString(sticky, "state");
    if (state == NULL) return -1;
    if (!PyDict_CheckExact(state)) {
        Py_DECREF(state);
        PyErr_SetString(PyExc_TypeError, "sticky.state must be a dict");
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire == NULL ? NULL : PyObject_GetAttrString(lock, "release");
    if (release == NULL) {
        Py_XDECREF(acquire);
        Py_DECREF(state);
        return -1;
    }
    PyObject *tp_cache = PyDict_New();
    if (tp_cache == NULL) {
        Py_DECREF(acquire);
        Py_DECREF(release);
        Py_DECREF(state);
        return -1;
    }
    Py_XSETREF(self->tp_cache, tp_cache);
    Py_CLEAR(self->last_cluster);
    Py_CLEAR(self->last_counts);
    Py_XSETREF(self->sticky_state, state);
    Py_XSETREF(self->lock, Py_NewRef(lock));
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release);
    Py_XSETREF(self->sender, Py_NewRef(sender));
    Py_XSETREF(self->metadata, Py_NewRef(metadata));
    Py_XSETREF(self->accumulator, Py_NewRef(accumulator));
    Py_XSETREF(self->batches, Py_NewRef(batches));
    Py_XSETREF(self->hash_cache, Py_NewRef(hash_cache));
    Py_XSETREF(self->sticky, Py_NewRef(sticky));
    Py_XSETREF(self->topic_touched, Py_NewRef(topic_touched));
    Py_XSETREF(self->future_type, (PyTypeObject *)Py_NewRef((PyObject *)future_type));
    Py_XSETREF(self->batch_type, (PyTypeObject *)Py_NewRef((PyObject *)batch_type));
    Py_XSETREF(self->monotonic_ms, Py_NewRef(monotonic_ms));
    Py_XSETREF(self->wall_ms, Py_NewRef(wall_ms));
    Py_XSETREF(self->gate, Py_NewRef(gate));
    Py_XSETREF(self->callback_codes, Py_NewRef(callback_codes));
    Py_CLEAR(self->last_code);
    self->max_request_size = max_request_size;
    self->record_overhead = record_overhead;
    self->bound_extra = bound_extra;
    self->hash_cache_size = hash_cache_size;
    self->touch_ms = touch_ms;
    self->ignore_keys = ignore_keys;
    self->lock_direct = lock_layout_ok(lock);
    if (self->lock_direct < 0) return -1;
    return 0;
}


/* murmur2 through the hash cache (as admission.key_hash_miss: the cache starts over when full); -1: error */
/* the gate (see FastSend.gate): a resized bytearray is read as closed */
static inline int gate_open(FastSend *fs) {
    return fs->gate != NULL && PyByteArray_GET_SIZE(fs->gate) == 1 && PyByteArray_AS_STRING(fs->gate)[0] != 0;
}

static long long cached_key_hash(FastSend *fs, PyObject *key) {
    PyObject *h = PyDict_GetItemWithError(fs->hash_cache, key);
    if (h != NULL) return PyLong_AsLongLong(h);
    if (PyErr_Occurred()) return -1;
    long long v = murmur2_positive((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
    if (PyDict_GET_SIZE(fs->hash_cache) >= fs->hash_cache_size) PyDict_Clear(fs->hash_cache);
    PyObject *hv = PyLong_FromLongLong(v);
    if (hv == NULL) return -1;
    int r = PyDict_SetItem(fs->hash_cache, key, hv);
    Py_DECREF(hv);
    return r < 0 ? -1 : v;
}

static int clock_now(PyObject *fn, clockid_t id, double *out) {
    if (fn == Py_None) {
        struct timespec t;
        clock_gettime(id, &t);
        *out = (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL) return -1;
    *out = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* sticky[1] += size; at a batch's worth: sticky[0] = next partition, sticky[1] = 0, sticky[2] = limit(topic) */
static int sticky_account(FastSend *fs, PyObject *st, PyObject *cluster, PyObject *topic, long long n,
                          long long size) {
    if (!PyList_CheckExact(st) || PyList_GET_SIZE(st) != 3) return 0;
    PyObject *size_obj = PyLong_FromLongLong(size);
    if (size_obj == NULL) return -1;
    PyObject *sent = PyNumber_Add(PyList_GET_ITEM(st, 1), size_obj);
    Py_DECREF(size_obj);
    if (sent == NULL) return -1;
    int full = PyObject_RichCompareBool(sent, PyList_GET_ITEM(st, 2), Py_GE);
    PyList_SetItem(st, 1, sent); /* steals sent */
    if (full <= 0) return full;
    PyObject *avail_map = PyObject_GetAttr(cluster, str_available);
    if (avail_map == NULL) return -1;
    PyObject *avail = PyDict_Check(avail_map) ? PyDict_GetItemWithError(avail_map, topic) : NULL;
    Py_XINCREF(avail);
    Py_DECREF(avail_map);
    if (avail == NULL) {
        if (PyErr_Occurred()) return -1;
        avail = PyTuple_New(0);
        if (avail == NULL) return -1;
    }
    PyObject *n_obj = PyLong_FromLongLong(n);
    PyObject *prev = PyList_GET_ITEM(st, 0);
    Py_INCREF(prev);
    PyObject *next = n_obj == NULL ? NULL
                                   : PyObject_CallMethodObjArgs(fs->sticky, str_next_partition, avail, n_obj, prev, NULL);
    Py_DECREF(prev);
    Py_XDECREF(n_obj);
    Py_DECREF(avail);
    if (next == NULL) return -1;
    PyList_SetItem(st, 0, next);
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) return -1;
    PyList_SetItem(st, 1, zero);
    PyObject *lim = PyObject_CallMethodObjArgs(fs->sticky, str_limit, topic, NULL);
    if (lim == NULL) return -1;
    PyList_SetItem(st, 2, lim);
    return 0;
}

/* (topic, partition), the key of the accumulator's batches dict: new reference */
static PyObject *topic_partition(FastSend *fs, PyObject *topic, long long part, long long n) {
    PyObject *tps = PyDict_GetItemWithError(fs->tp_cache, topic);
    if (tps == NULL && PyErr_Occurred()) return NULL;
    if (tps == NULL || PyTuple_GET_SIZE(tps) <= part) {
        if (PyDict_GET_SIZE(fs->tp_cache) >= 4096) PyDict_Clear(fs->tp_cache);
        PyObject *made = PyTuple_New((Py_ssize_t)n);
        if (made == NULL) return NULL;
        for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
            PyObject *one = Py_BuildValue("(On)", topic, i);
            if (one == NULL) {
                Py_DECREF(made);
                return NULL;
            }
            PyTuple_SET_ITEM(made, i, one);
        }
        int r = PyDict_SetItem(fs->tp_cache, topic, made);
        Py_DECREF(made);
        if (r < 0) return NULL;
        tps = made; /* (held by the cache) */
    }
    return Py_NewRef(PyTuple_GET_ITEM(tps, (Py_ssize_t)part));
}

/*
 * The fast path: 1 with *out the future, 0 when the record must take the Python path (nothing changed),
 * -1 with an exception set. args: topic, value, key, headers, partition, timestamp_ms, callback.
 */
static int fast_send(FastSend *fs, PyObject **a, PyObject **out) {
    /* (held: waiting for the lock lets other threads run, and one may replace the topic's sticky list) */
    PyObject *sticky = NULL;
    PyObject *topic = a[0], *value = a[1], *key = a[2], *partition = a[4], *ts_arg = a[5], *callback = a[6];
    if (a[3] != Py_None || !PyUnicode_CheckExact(topic)) return 0;
    if (value != Py_None && !PyBytes_CheckExact(value)) return 0;
    if (key != Py_None && !PyBytes_CheckExact(key)) return 0;
    if (callback != Py_None && fs->callback_codes != NULL && fs->callback_codes != Py_None) {
        /* only a function, or a bound method of one, whose code send() has checked (future.check_callback);
           anything else is checked by the Python send() */
        int method = PyMethod_Check(callback);
        PyObject *fn = method ? PyMethod_GET_FUNCTION(callback) : callback;
        if (!method && !PyFunction_Check(fn)) {
            /* an object whose class defines __call__ in Python: called as that bound method */
            fn = _PyType_Lookup(Py_TYPE(callback), str___call__); /* (borrowed) */
            if (fn == NULL) return 0;
            method = 1;
        }
        if (!PyFunction_Check(fn)) return 0;
        PyObject *code = PyFunction_GET_CODE(fn);
        if (code != fs->last_code || method != fs->last_code_method) {
            PyObject *id = PyLong_FromLongLong(method ? -(long long)(intptr_t)code : (long long)(intptr_t)code);
            if (id == NULL) return -1;
            int found = PyDict_Contains(fs->callback_codes, id);
            Py_DECREF(id);
            if (found < 0) return -1;
            if (!found) return 0;
            Py_XSETREF(fs->last_code, Py_NewRef(code));
            fs->last_code_method = method;
        }
    }
    /* the producer is open and has no fatal error */
    if (!gate_open(fs)) return 0;
    /* the timestamp */
    long long timestamp;
    if (ts_arg == Py_None) {
        if (fs->wall_ms == Py_None) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            timestamp = (long long)(((double)t.tv_sec + (double)t.tv_nsec * 1e-9) * 1000.0);
        } else {
            PyObject *r = PyObject_CallNoArgs(fs->wall_ms);
            if (r == NULL) return -1;
            if (!PyLong_CheckExact(r)) {
                Py_DECREF(r);
                return 0;
            }
            timestamp = PyLong_AsLongLong(r);
            Py_DECREF(r);
            if (timestamp == -1 && PyErr_Occurred()) return -1;
        }
    } else {
        if (!PyLong_CheckExact(ts_arg)) return 0;
        int overflow;
        timestamp = PyLong_AsLongLongAndOverflow(ts_arg, &overflow);
        if (overflow || timestamp < 0) return 0; /* (-1 is refused too: no error is set for a plain -1) */
    }
    double now;
    /* the partition count, known, and the topic touched recently */
    PyObject *cluster = PyObject_GetAttr(fs->metadata, str_cluster);
    if (cluster == NULL) return -1;
    if (cluster != fs->last_cluster) {
        PyObject *counts = PyObject_GetAttr(cluster, str_partition_counts);
        if (counts == NULL) goto error_cluster;
        if (!PyDict_Check(counts)) {
            Py_DECREF(counts);
            goto fallback_cluster;
        }
        Py_XSETREF(fs->last_counts, counts);
        Py_XSETREF(fs->last_cluster, Py_NewRef(cluster));
    }
    PyObject *n_obj = PyDict_GetItemWithError(fs->last_counts, topic); /* borrowed: last_counts holds it */
    long long n = n_obj == NULL ? -1 : PyLong_AsLongLong(n_obj);
    if (n_obj == NULL) {
        if (PyErr_Occurred()) goto error_cluster;
        goto fallback_cluster;
    }
    if (n == -1 && PyErr_Occurred()) goto error_cluster;
    if (n <= 0) goto fallback_cluster;
    /* (the touch check has a 1 s period: the coarse clock, a few ms behind time.monotonic(), is enough) */
#ifdef CLOCK_MONOTONIC_COARSE
    if (clock_now(fs->monotonic_ms, CLOCK_MONOTONIC_COARSE, &now) < 0) goto error_cluster;
#else
    if (clock_now(fs->monotonic_ms, CLOCK_MONOTONIC, &now) < 0) goto error_cluster;
#endif
    PyObject *touched = PyDict_GetItemWithError(fs->topic_touched, topic);
    if (touched == NULL) {
        if (PyErr_Occurred()) goto error_cluster;
        goto fallback_cluster; /* never touched: the Python path touches it */
    }
    double t_touched = PyFloat_AsDouble(touched);
    if (t_touched == -1.0 && PyErr_Occurred()) goto error_cluster;
    if (now - t_touched > fs->touch_ms) goto fallback_cluster;
    /* the size bound */
    Py_ssize_t klen = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
    Py_ssize_t vlen = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
    long long size = fs->record_overhead + (vlen > 0 ? vlen : 0) + (klen > 0 ? klen : 0);
    if (size + fs->bound_extra > fs->max_request_size) goto fallback_cluster;
    /* the partition */
    long long part;
    if (partition != Py_None) {
        if (!PyLong_CheckExact(partition)) goto fallback_cluster;
        int overflow;
        part = PyLong_AsLongLongAndOverflow(partition, &overflow);
        if (overflow || part < 0 || part >= n) goto fallback_cluster;
    } else if (key != Py_None && !fs->ignore_keys) {
        long long h = cached_key_hash(fs, key);
        if (h < 0) goto error_cluster;
        part = h % n;
    } else {
        sticky = PyDict_GetItemWithError(fs->sticky_state, topic);
        if (sticky == NULL) {
            if (PyErr_Occurred()) goto error_cluster;
            goto fallback_cluster;
        }
        Py_INCREF(sticky);
        if (!PyList_CheckExact(sticky) || PyList_GET_SIZE(sticky) != 3) goto fallback_cluster;
        part = PyLong_AsLongLong(PyList_GET_ITEM(sticky, 0));
        if (part == -1 && PyErr_Occurred()) goto error_cluster;
        if (part < 0 || part >= n) goto fallback_cluster;
    }
    /* the append, under the accumulator's lock, into the partition's last open batch */
    PyObject *tp = topic_partition(fs, topic, part, n);
    if (tp == NULL) goto error_cluster;
    if (fs_lock(fs) < 0) {
        Py_DECREF(tp);
        goto error_cluster;
    }
    int status = 0; /* 1 appended, 0 fallback, -1 error */
    PyObject *fut = NULL, *last = NULL;
    /* again under the lock: the accumulator's close() clears the flag while it holds the lock */
    if (!gate_open(fs)) goto unlock;
    PyObject *dq = PyDict_GetItemWithError(fs->batches, tp);
    if (dq == NULL) {
        if (PyErr_Occurred()) status = -1;
        goto unlock;
    }
    Py_INCREF(dq);
    Py_ssize_t dq_len = PySequence_Size(dq);
    last = dq_len > 0 ? PySequence_GetItem(dq, dq_len - 1) : NULL;
    Py_DECREF(dq);
    if (dq_len < 0 || (dq_len > 0 && last == NULL)) {
        status = -1;
        goto unlock;
    }
    if (last == NULL || Py_TYPE(last) != fs->batch_type) goto unlock;
    if (*(PyObject **)((char *)last + fs->off_closed) != Py_False) goto unlock;
    PyObject *builder = *(PyObject **)((char *)last + fs->off_builder);
    PyObject *thunks = *(PyObject **)((char *)last + fs->off_thunks);
    if (builder == NULL || !PyObject_TypeCheck(builder, &RecordsBufferType)) goto unlock;
    if (callback != Py_None && (thunks == NULL || !PyList_CheckExact(thunks))) goto unlock;
    RecordsBuffer *rb = (RecordsBuffer *)builder;
    if (check_buffer(rb) < 0) {
        PyErr_Clear();
        goto unlock;
    }
    long long delta = rb->count;
    /* (no headers: the encoder never hands this record to the Python encoder, which would need ts_obj) */
    int appended = append_one(rb, Py_None, timestamp, key, value, Py_None);
    if (appended <= 0) {
        status = appended; /* 0: the batch is full, the Python path opens the next one */
        goto unlock;
    }
    fut = fs->future_type->tp_alloc(fs->future_type, 0);
    if (fut == NULL) {
        status = -1;
        goto unlock;
    }
    /* Not tracked by the cyclic GC: a future only refers to its batch, and the one cycle it can be part of
       (batch -> thunks -> (callback, future) -> batch) is broken when the batch completes (thunks = None).
       Tracked, the futures of queued records made the GC traverse them all over again. */
    PyObject_GC_UnTrack(fut);
    FutureBase *fb = (FutureBase *)fut;
    fb->batch = Py_NewRef(last);
    fb->delta = delta;
    fb->timestamp = timestamp;
    fb->key_size = klen;
    fb->value_size = vlen;
    status = 1;
    if (callback != Py_None) {
        PyObject *thunk = PyTuple_Pack(2, callback, fut);
        if (thunk != NULL) PyObject_GC_UnTrack(thunk); /* (as the future: the batch's completion drops it) */
        if (thunk == NULL || PyList_Append(thunks, thunk) < 0) status = -1;
        Py_XDECREF(thunk);
    }
unlock:
    Py_XDECREF(last);
    Py_DECREF(tp);
    {
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        if (fs_unlock(fs) < 0) {
            Py_XDECREF(exc_type);
            Py_XDECREF(exc_value);
            Py_XDECREF(exc_tb);
            status = -1;
        } else {
            PyErr_Restore(exc_type, exc_value, exc_tb);
        }
    }
    if (status <= 0) {
        Py_XDECREF(fut);
        if (status == 0) goto fallback_cluster;
        goto error_cluster;
    }
    /* uniform sticky: account the record's bytes; a batch's worth moves the topic on (as Python send()) */
    if (sticky != NULL) {
        int err = sticky_account(fs, sticky, cluster, topic, n, size);
        Py_CLEAR(sticky);
        if (err < 0) {
            Py_DECREF(fut);
            goto error_cluster;
        }
    }
    Py_DECREF(cluster);
    fs->hits++;
    *out = fut;
    return 1;
fallback_cluster:
    Py_XDECREF(sticky);
    Py_DECREF(cluster);
    return 0;
error_cluster:
    Py_XDECREF(sticky);
    Py_DECREF(cluster);
    return -1;
}

static PyMemberDef FastSend_members[] = {
    {"hits", T_LONGLONG, offsetof(FastSend, hits), READONLY, "records queued by the fast path"},
    {"lock_direct", T_INT, offsetof(FastSend, lock_direct), READONLY, "the lock is taken without a call"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FastSendType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.FastSend",
    .tp_basicsize = sizeof(FastSend),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What Producer.send()'s compiled fast path reads (the producer's _fast).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastSend_init,
    .tp_dealloc = (destructor)FastSend_dealloc,
    .tp_members = FastSend_members,
};

/* SendMethod(func): the descriptor Producer.send */

typedef struct {
    PyObject_HEAD
    PyObject *func;
    PyObject *dict;
    vectorcallfunc vectorcall;
} SendMethod;

static int kw_index(PyObject *name) {
    for (int i = 0; i < 7; i++)
        if (send_kwnames[i] == name) return i;
    for (int i = 0; i < 7; i++)
        if (PyUnicode_Check(name) && PyUnicode_Compare(send_kwnames[i], name) == 0) return i;
    return -1;
}

static PyObject *SendMethod_vectorcall(SendMethod *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs >= 1 && nargs + nkw >= 2 && nargs + nkw <= 8) {
        PyObject *producer = args[0];
        PyObject *fs = PyObject_GetAttr(producer, str_fast);
        if (fs == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
            PyErr_Clear(); /* (a producer not made by Producer.__init__) */
            return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
        }
        if (Py_TYPE(fs) == &FastSendType) {
            PyObject *a[7] = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None, Py_None};
            int ok = 1;
            for (Py_ssize_t i = 1; i < nargs; i++) a[i - 1] = args[i];
            for (Py_ssize_t j = 0; j < nkw && ok; j++) {
                int k = kw_index(PyTuple_GET_ITEM(kwnames, j));
                if (k < nargs - 1) ok = 0; /* unknown, or given twice: the Python send() says so */
                else a[k] = args[nargs + j];
            }
            if (ok && a[0] != NULL) {
                PyObject *out = NULL;
                int r = fast_send((FastSend *)fs, a, &out);
                Py_DECREF(fs);
                if (r > 0) return out;
                if (r < 0) return NULL;
                return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
            }
        }
        Py_DECREF(fs);
    }
    return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
}

static int SendMethod_init(SendMethod *self, PyObject *args, PyObject *kwds) {
    PyObject *func;
    if (!PyArg_ParseTuple(args, "O:SendMethod", &func)) return -1;
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "SendMethod(func): func must be callable");
        return -1;
    }
    Py_XSETREF(self->func, Py_NewRef(func));
    self->vectorcall = (vectorcallfunc)SendMethod_vectorcall;
    return 0;
}

static PyObject *SendMethod_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    SendMethod *self = (SendMethod *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = (vectorcallfunc)SendMethod_vectorcall;
    return (PyObject *)self;
}

static PyObject *SendMethod_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int SendMethod_traverse(SendMethod *self, visitproc visit, void *arg) {
    Py_VISIT(self->func);
    Py_VISIT(self->dict);
    return 0;
}

static int SendMethod_clear(SendMethod *self) {
    Py_CLEAR(self->func);
    Py_CLEAR(self->dict);
    return 0;
}

static void SendMethod_dealloc(SendMethod *self) {
    PyObject_GC_UnTrack(self);
    SendMethod_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *SendMethod_call_func(SendMethod *self, PyObject *args, PyObject *kwds) {
    return PyVectorcall_Call((PyObject *)self, args, kwds);
}

static PyMemberDef SendMethod_members[] = {
    {"__func__", T_OBJECT, offsetof(SendMethod, func), READONLY, "the Python implementation"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SendMethod, vectorcall), READONLY},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef SendMethod_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SendMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.SendMethod",
    .tp_basicsize = sizeof(SendMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A method whose plain calls run the owner's FastSend (Producer.send); others call __func__.",
    .tp_new = SendMethod_new,
    .tp_init = (initproc)SendMethod_init,
    .tp_dealloc = (destructor)SendMethod_dealloc,
    .tp_traverse = (traverseproc)SendMethod_traverse,
    .tp_clear = (inquiry)SendMethod_clear,
    .tp_descr_get = SendMethod_get,
    .tp_call = (ternaryfunc)SendMethod_call_func,
    .tp_vectorcall_offset = offsetof(SendMethod, vectorcall),
    .tp_dictoffset = offsetof(SendMethod, dict),
    .tp_members = SendMethod_members,
    .tp_getset = SendMethod_getset,
};

static int fastsend_module_init(PyObject *mod) {
    static const char *names[7] = {"topic", "value", "key", "headers", "partition", "timestamp_ms", "callback"};
    for (int i = 0; i < 7; i++) {
        send_kwnames[i] = PyUnicode_InternFromString(names[i]);
        if (send_kwnames[i] == NULL) return -1;
    }
    if ((str_cluster = PyUnicode_InternFromString("cluster")) == NULL ||
        (str_partition_counts = PyUnicode_InternFromString("partition_counts")) == NULL ||
        (str_available = PyUnicode_InternFromString("available")) == NULL ||
        (str_next_partition = PyUnicode_InternFromString("next_partition")) == NULL ||
        (str_limit = PyUnicode_InternFromString("limit")) == NULL ||
        (str_fast = PyUnicode_InternFromString("_fast")) == NULL ||
        (str___call__ = PyUnicode_InternFromString("__call__")) == NULL)
        return -1;
    if (PyType_Ready(&FastSendType) < 0 || PyType_Ready(&SendMethodType) < 0) return -1;
    Py_INCREF(&FastSendType);
    if (PyModule_AddObject(mod, "FastSend", (PyObject *)&FastSendType) < 0) {
        Py_DECREF(&FastSendType);
        return -1;
    }
    Py_INCREF(&SendMethodType);
    if (PyModule_AddObject(mod, "SendMethod", (PyObject *)&SendMethodType) < 0) {
        Py_DECREF(&SendMethodType);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * asyncio record futures (kproducer/aio.py): AioFuture is the base of aio.RecordFuture (its two slots, the run
 * of staged records and the record's index there). Awaiting one whose batch is done (the common case: no
 * per-record state, not split, no error) gives its RecordMetadata at once, computed here from the run and the
 * batch, through a one-shot iterator (AioDone); anything else calls the Python method _await (aio.py, the one
 * implementation of the semantics). aio_setup() gives this code aio.py's classes and their slot offsets.
 */

typedef struct {
    PyObject_HEAD
    PyObject *run;
    Py_ssize_t i;
} AioFuture;

typedef struct {
    PyObject_HEAD
    PyObject *value; /* the result, handed over once */
    int yield_first; /* a bare yield first (the task goes round the loop once), then the result */
} AioDone;

static PyTypeObject *aio_future_type, *aio_run_type, *aio_slot_type, *aio_batch_type, *aio_meta_type;
static Py_ssize_t aio_run_extra, aio_run_segs, aio_run_starts, aio_run_sizes, aio_run_keys, aio_run_values,
    aio_run_ts, aio_slot_done, aio_slot_split, aio_slot_batch, aio_b_error, aio_b_base_offset, aio_b_lat,
    aio_b_topic, aio_b_partition;
static PyObject *str_aio_await;
#define AIO_AT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* StopIteration(rec) raised (rec released); NULL */
static PyObject *aio_ready_stop(PyObject *rec) {
    PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, rec);
    Py_DECREF(rec);
    if (exc != NULL) {
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* throw(exc) / throw(type[, value[, tb]]): raises the exception, as a finished generator's or a just-started
 * coroutine's (AioDone, AioReady) */
static PyObject *aio_throw_args(PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected at least 1 argument, at most 3");
        return NULL;
    }
    PyObject *typ = args[0], *val = nargs > 1 ? args[1] : Py_None;
    if (PyExceptionInstance_Check(typ)) {
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    } else if (PyExceptionClass_Check(typ)) {
        PyErr_SetObject(typ, val);
    } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
    }
    return NULL;
}

static void AioDone_dealloc(AioDone *self) {
    Py_XDECREF(self->value);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *AioDone_next(AioDone *self) {
    if (self->yield_first) {
        self->yield_first = 0;
        Py_RETURN_NONE;
    }
    PyObject *v = self->value;
    if (v == NULL) return NULL; /* (exhausted: StopIteration without a value) */
    self->value = NULL;
    return aio_ready_stop(v);
}

#if PY_VERSION_HEX >= 0x030A0000
static PySendResult AioDone_send(AioDone *self, PyObject *arg, PyObject **result) {
    (void)arg;
    if (self->yield_first) {
        self->yield_first = 0;
        *result = Py_NewRef(Py_None);
        return PYGEN_NEXT;
    }
    if (self->value == NULL) {
        Py_INCREF(Py_None);
        *result = Py_None;
        return PYGEN_RETURN;
    }
    *result = self->value; /* (the reference moves to the caller) */
    self->value = NULL;
    return PYGEN_RETURN;
}
#endif

static PyObject *AioDone_send_method(AioDone *self, PyObject *arg) {
    (void)arg;
    return AioDone_next(self);
}

static PyObject *AioDone_throw(AioDone *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_CLEAR(self->value);
    self->yield_first = 0;
    return aio_throw_args(args, nargs);
}

static PyObject *AioDone_close(AioDone *self, PyObject *unused) {
    (void)unused;
    Py_CLEAR(self->value);
    self->yield_first = 0;
    Py_RETURN_NONE;
}

static PyMethodDef AioDone_methods[] = {
    {"send", (PyCFunction)AioDone_send_method, METH_O, "send(value): finishes with the result (StopIteration), after a bare yield when one is due."},
    {"throw", (PyCFunction)(void (*)(void))AioDone_throw, METH_FASTCALL, "throw(exc): raises exc."},
    {"close", (PyCFunction)AioDone_close, METH_NOARGS, "close()."},
    {NULL, NULL, 0, NULL},
};

static PyAsyncMethods AioDone_async = {
#if PY_VERSION_HEX >= 0x030A0000
    .am_send = (sendfunc)AioDone_send,
#endif
};

static PyTypeObject AioDoneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproducer.protocol._speedups.AioDone",
    .tp_basicsize = sizeof(AioDone),
    .tp_dealloc = (destructor)AioDone_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A finished await: gives its value once (after one bare yield when one is due).",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)AioDone_next,
    .tp_methods = AioDone_methods,
    .tp_as_async = &AioDone_async,
};

static int aio_ssize(PyObject *o, Py_ssize_t *out) {
    if (o == NULL || !PyLong_CheckExact(o)) return -1;
    *out = PyLong_AsSsize_t(o);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int aio_size_of(PyObject *o, Py_ssize_t *out) {
    if (o == Py_None) {
        *out = -1;
        return 0;
    }
    if (o == NULL || !PyBytes_CheckExact(o)) return -1;
    *out = PyBytes_GET_SIZE(o);
    return 0;
}

/* The RecordMetadata of a record whose batch is done (the common case), or NULL (no error set) otherwise. */
static PyObject *aio_fast_meta(AioFuture *self) {
    PyObject *run = self->run;
    if (aio_run_type == NULL || run == NULL || Py_TYPE(run) != aio_run_type || AIO_AT(run, aio_run_extra) != Py_None)
        return NULL;
    PyObject *segs = AIO_AT(run, aio_run_segs), *starts = AIO_AT(run, aio_run_starts);
    if (segs == NULL || starts == NULL || !PyList_CheckExact(segs) || !PyList_CheckExact(starts)) return NULL;
    Py_ssize_t i = self->i, lo = 0, hi = PyList_GET_SIZE(starts), s;
    while (lo < hi) { /* bisect_right(starts, i) */
        Py_ssize_t mid = (lo + hi) / 2;
        if (aio_ssize(PyList_GET_ITEM(starts, mid), &s) < 0) return NULL;
        if (i < s) hi = mid;
        else lo = mid + 1;
    }
    if (lo < 1 || lo > PyList_GET_SIZE(segs)) return NULL;
    PyObject *seg = PyList_GET_ITEM(segs, lo - 1);
    Py_ssize_t start, first;
    if (!PyTuple_CheckExact(seg) || PyTuple_GET_SIZE(seg) != 4 || aio_ssize(PyTuple_GET_ITEM(seg, 0), &start) < 0 ||
        aio_ssize(PyTuple_GET_ITEM(seg, 2), &first) < 0)
        return NULL;
    PyObject *slot = PyTuple_GET_ITEM(seg, 3);
    if (Py_TYPE(slot) != aio_slot_type || AIO_AT(slot, aio_slot_done) != Py_True ||
        AIO_AT(slot, aio_slot_split) != Py_None)
        return NULL;
    PyObject *b = AIO_AT(slot, aio_slot_batch);
    if (b == NULL || Py_TYPE(b) != aio_batch_type || AIO_AT(b, aio_b_error) != Py_None) return NULL;
    Py_ssize_t base, lat, ks, vs;
    PyObject *topic = AIO_AT(b, aio_b_topic), *partition = AIO_AT(b, aio_b_partition), *ts = AIO_AT(run, aio_run_ts);
    if (aio_ssize(AIO_AT(b, aio_b_base_offset), &base) < 0 || aio_ssize(AIO_AT(b, aio_b_lat), &lat) < 0 ||
        topic == NULL || partition == NULL || ts == NULL)
        return NULL;
    PyObject *sizes = AIO_AT(run, aio_run_sizes);
    if (sizes == Py_None) {
        PyObject *keys = AIO_AT(run, aio_run_keys), *values = AIO_AT(run, aio_run_values);
        if (keys == NULL || values == NULL || !PyList_CheckExact(keys) || !PyList_CheckExact(values) ||
            i >= PyList_GET_SIZE(keys) || i >= PyList_GET_SIZE(values) || i < 0 ||
            aio_size_of(PyList_GET_ITEM(keys, i), &ks) < 0 || aio_size_of(PyList_GET_ITEM(values, i), &vs) < 0)
            return NULL;
    } else if (sizes == NULL || !PyTuple_CheckExact(sizes) || PyTuple_GET_SIZE(sizes) != 2 ||
               aio_ssize(PyTuple_GET_ITEM(sizes, 0), &ks) < 0 || aio_ssize(PyTuple_GET_ITEM(sizes, 1), &vs) < 0) {
        return NULL;
    }
    PyObject *meta = aio_meta_type->tp_alloc(aio_meta_type, 6);
    if (meta == NULL) return NULL;
    PyObject *off = PyLong_FromSsize_t(base >= 0 ? base + first + i - start : -1);
    PyObject *tso = lat >= 0 ? PyLong_FromSsize_t(lat) : Py_NewRef(ts);
    PyObject *kso = PyLong_FromSsize_t(ks), *vso = PyLong_FromSsize_t(vs);
    PyTuple_SET_ITEM(meta, 0, Py_NewRef(topic));
    PyTuple_SET_ITEM(meta, 1, Py_NewRef(partition));
    PyTuple_SET_ITEM(meta, 2, off);
    PyTuple_SET_ITEM(meta, 3, tso);
    PyTuple_SET_ITEM(meta, 4, kso);
    PyTuple_SET_ITEM(meta, 5, vso);
    if (off == NULL || tso == NULL || kso == NULL || vso == NULL) {
        Py_DECREF(meta);
        return NULL;
    }
    /* all six fields atomic (str, ints) and no __dict__: it cannot be part of a reference cycle, so the cyclic
     * GC need not track it (as it untracks such plain tuples itself; a tuple subclass it never untracks) */
    if (aio_meta_type->tp_dictoffset == 0 && PyUnicode_CheckExact(topic) && PyLong_CheckExact(partition) &&
        PyLong_CheckExact(tso) && PyObject_IS_GC(meta))
        PyObject_GC_UnTrack(meta);
    return meta;
}

static int aio_await_yield(void); /* (the aiosend section below) */

static PyObject *AioFuture_await(PyObject *op) {
    PyObject *meta = aio_fast_meta((AioFuture *)op);
    if (meta != NULL) {
        AioDone *it = PyObject_New(AioDone, &AioDoneType);
        if (it == NULL) {
            Py_DECREF(meta);
            return NULL;
        }
        it->value = meta;
        it->yield_first = aio_await_yield();
        return (PyObject *)it;
    }
    if (PyErr_Occurred()) return NULL;
    return PyObject_CallMethodNoArgs(op, str_aio_await);
}

static void AioFuture_dealloc(AioFuture *self) {
    Py_CLEAR(self->run);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* RecordFuture(...) from Python (send()'s Python paths): not tracked either, as aio_stage's (see AioFutureType);
 * only RecordFuture itself (a subclass of it may add a __dict__ and so take part in a cycle) */
static PyObject *AioFuture_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *self = PyType_GenericNew(type, args, kwds);
    if (self != NULL && type == aio_future_type && PyObject_IS_GC(self)) PyObject_GC_UnTrack(self);
    return self;
}

static PyMemberDef AioFuture_members[] = {
    {"_run", T_OBJECT_EX, offsetof(AioFuture, run), 0, "the run of staged records the record belongs to"},
    {"_i", T_PYSSIZET, offsetof(AioFuture, i), 0, "the record's index in its run"},
    {NULL},
};

static PyAsyncMethods AioFuture_async = {
    .am_await = (unaryfunc)AioFuture_await,
};

static PyTypeObject AioFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproducer.protocol._speedups.AioFuture",
    .tp_basicsize = sizeof(AioFuture),
    .tp_dealloc = (destructor)AioFuture_dealloc,
    /* not tracked by the cyclic GC (as FastSend's futures): what a record future refers to (its run) never
     * refers back to it once the record is settled */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The compiled base of kproducer.aio.RecordFuture.",
    .tp_new = AioFuture_new,
    .tp_iter = (getiterfunc)AioFuture_await,
    .tp_members = AioFuture_members,
    .tp_as_async = &AioFuture_async,
};

/* AioHot: send()'s counters and memory bound for its hot path (aio.py's _HotState, compiled). */
typedef struct {
    PyObject_HEAD
    Py_ssize_t sends, need, limit, count, max_value, stage_max, bound;
} AioHot;

static PyMemberDef AioHot_members[] = {
    {"sends", T_PYSSIZET, offsetof(AioHot, sends), 0, "send() calls since the last yield to the loop"},
    {"need", T_PYSSIZET, offsetof(AioHot, need), 0, "buffer memory the staged records may take at most"},
    {"limit", T_PYSSIZET, offsetof(AioHot, limit), 0, "memory the hot path may stage up to (-1: none)"},
    {"count", T_PYSSIZET, offsetof(AioHot, count), 0, "records staged"},
    {"max_value", T_PYSSIZET, offsetof(AioHot, max_value), 0, "the longest value the hot path takes"},
    {"stage_max", T_PYSSIZET, offsetof(AioHot, stage_max), 0, "staged records appended at once at the latest"},
    {"bound", T_PYSSIZET, offsetof(AioHot, bound), 0, "a record's size bound beyond its value"},
    {NULL},
};

static PyTypeObject AioHotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproducer.protocol._speedups.AioHot",
    .tp_basicsize = sizeof(AioHot),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "AsyncProducer.send()'s hot-path state.",
    .tp_new = PyType_GenericNew,
    .tp_members = AioHot_members,
};

static Py_ssize_t aio_run_topic, aio_run_owner;
static PyObject *str_aio_flush;

/* aio_stage(hot, run, topic, value): send()'s hot path -- one more keyless bytes value for the current keyless
 * run (run: its first record passed every other check, which hold until the run is appended), when the
 * timestamp (wall clock, ms) is still the run's, the value is not too long and the memory bound holds. Returns
 * the record's future, or None (nothing changed): send() then takes its Python path. */
static PyObject *aio_stage(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 4 || Py_TYPE(args[0]) != &AioHotType) {
        PyErr_SetString(PyExc_TypeError, "aio_stage(hot, run, topic, value)");
        return NULL;
    }
    AioHot *hot = (AioHot *)args[0];
    PyObject *run = args[1], *value = args[3];
    if (aio_run_type == NULL || Py_TYPE(run) != aio_run_type || !PyBytes_CheckExact(value) ||
        AIO_AT(run, aio_run_topic) != args[2] || ((hot->sends + 1) & 31) == 0)
        Py_RETURN_NONE;
    Py_ssize_t size = PyBytes_GET_SIZE(value), ts;
    if (size > hot->max_value || aio_ssize(AIO_AT(run, aio_run_ts), &ts) < 0) Py_RETURN_NONE;
    Py_ssize_t need = hot->need + 2 * (size + hot->bound);
    if (need > hot->limit) Py_RETURN_NONE;
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0 ||
        (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 != (int64_t)ts)
        Py_RETURN_NONE;
    PyObject *keys = AIO_AT(run, aio_run_keys), *values = AIO_AT(run, aio_run_values);
    if (keys == NULL || values == NULL || !PyList_CheckExact(keys) || !PyList_CheckExact(values)) Py_RETURN_NONE;
    AioFuture *rec = (AioFuture *)aio_future_type->tp_alloc(aio_future_type, 0);
    if (rec == NULL) return NULL;
    if (PyObject_IS_GC((PyObject *)rec)) PyObject_GC_UnTrack(rec); /* (see AioFutureType) */
    rec->run = Py_NewRef(run);
    rec->i = PyList_GET_SIZE(values);
    if (PyList_Append(keys, Py_None) < 0) {
        Py_DECREF(rec);
        return NULL;
    }
    if (PyList_Append(values, value) < 0) {
        PyObject *none = NULL;
        PyList_SetSlice(keys, PyList_GET_SIZE(keys) - 1, PyList_GET_SIZE(keys), none);
        Py_DECREF(rec);
        return NULL;
    }
    hot->need = need;
    hot->sends += 1;
    if (++hot->count >= hot->stage_max) {
        PyObject *owner = AIO_AT(run, aio_run_owner);
        PyObject *r = owner == NULL ? NULL : PyObject_CallMethodNoArgs(owner, str_aio_flush);
        if (r == NULL) {
            /* the record is staged: its future reports what becomes of it; the error goes to the caller */
            Py_DECREF(rec);
            return NULL;
        }
        Py_DECREF(r);
    }
    return (PyObject *)rec;
}

static int aio_slot(PyTypeObject *tp, const char *name, Py_ssize_t *off) {
    if (!PyType_Check((PyObject *)tp)) {
        PyErr_SetString(PyExc_TypeError, "aio_setup() takes types");
        return -1;
    }
    return slot_offset(tp, name, off);
}

/* aio_setup(RecordFuture, _Run, _BatchSlot, ProducerBatch, RecordMetadata) */
static PyObject *aio_setup(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "aio_setup() takes 5 types");
        return NULL;
    }
    PyTypeObject *run = (PyTypeObject *)args[1], *slot = (PyTypeObject *)args[2], *batch = (PyTypeObject *)args[3];
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &AioFutureType) ||
        !PyType_Check(args[4]) || !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "aio_setup(): bad RecordFuture or RecordMetadata type");
        return NULL;
    }
    if (aio_slot(run, "extra", &aio_run_extra) < 0 || aio_slot(run, "segs", &aio_run_segs) < 0 ||
        aio_slot(run, "starts", &aio_run_starts) < 0 || aio_slot(run, "sizes", &aio_run_sizes) < 0 ||
        aio_slot(run, "keys", &aio_run_keys) < 0 || aio_slot(run, "values", &aio_run_values) < 0 ||
        aio_slot(run, "ts", &aio_run_ts) < 0 || aio_slot(run, "topic", &aio_run_topic) < 0 ||
        aio_slot(run, "owner", &aio_run_owner) < 0 || aio_slot(slot, "done", &aio_slot_done) < 0 ||
        aio_slot(slot, "split", &aio_slot_split) < 0 || aio_slot(slot, "batch", &aio_slot_batch) < 0 ||
        aio_slot(batch, "error", &aio_b_error) < 0 || aio_slot(batch, "base_offset", &aio_b_base_offset) < 0 ||
        aio_slot(batch, "log_append_time", &aio_b_lat) < 0 || aio_slot(batch, "topic", &aio_b_topic) < 0 ||
        aio_slot(batch, "partition", &aio_b_partition) < 0)
        return NULL;
    PyTypeObject *types[5] = {(PyTypeObject *)args[0], run, slot, batch, (PyTypeObject *)args[4]};
    PyTypeObject **dest[5] = {&aio_future_type, &aio_run_type, &aio_slot_type, &aio_batch_type, &aio_meta_type};
    for (int k = 0; k < 5; k++) {
        Py_INCREF(types[k]);
        Py_XSETREF(*dest[k], types[k]);
    }
    Py_RETURN_NONE;
}

static int aio_module_init(PyObject *mod) {
    if ((str_aio_await = PyUnicode_InternFromString("_await")) == NULL ||
        (str_aio_flush = PyUnicode_InternFromString("_flush_staged")) == NULL)
        return -1;
    if (PyType_Ready(&AioDoneType) < 0 || PyType_Ready(&AioFutureType) < 0 || PyType_Ready(&AioHotType) < 0)
        return -1;
    Py_INCREF(&AioHotType);
    if (PyModule_AddObject(mod, "AioHot", (PyObject *)&AioHotType) < 0) {
        Py_DECREF(&AioHotType);
        return -1;
    }
    Py_INCREF(&AioFutureType);
    if (PyModule_AddObject(mod, "AioFuture", (PyObject *)&AioFutureType) < 0) {
        Py_DECREF(&AioFutureType);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * AsyncProducer.send() without a coroutine (kproducer/aio.py): AioSendMethod(func) is the class attribute
 * AsyncProducer.send, a method descriptor like SendMethod. A call that aio_stage takes (a keyless bytes value
 * for the topic of the current keyless run: send()'s hot path) stages the record here and returns an AioReady,
 * a finished coroutine-like object holding the record's future (``await`` gives it at once); every other call
 * runs func, the Python ``async def send``, and returns its coroutine. AioReady is not tracked by the cyclic
 * GC (it refers only to the record future, itself untracked) and aio.py registers it as a
 * collections.abc.Coroutine, so asyncio.create_task/ensure_future/gather/wait_for take it. One that is never
 * awaited warns as a coroutine does (RuntimeWarning); its record was staged by the call all the same.
 */

typedef struct {
    PyObject_HEAD
    PyObject *rec;  /* the record's future; NULL once handed over, closed or thrown into */
    int started;    /* handed over, closed or thrown into (a second await raises, as a coroutine's) */
} AioReady;

static PyObject *str_aio_hot, *str_aio_keyless_run, *aio_send_kwnames[6];

static void AioReady_dealloc(AioReady *self) {
    if (self->rec != NULL) {
        /* never awaited: warn as an unawaited coroutine does (the record was staged by the call) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (PyErr_WarnEx(PyExc_RuntimeWarning, "coroutine 'AsyncProducer.send' was never awaited", 1) < 0)
            PyErr_WriteUnraisable((PyObject *)self);
        PyErr_Restore(et, ev, tb);
        Py_CLEAR(self->rec);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the record's future (a new reference), or NULL with the error a finished coroutine's send() raises */
static PyObject *aio_ready_take(AioReady *self, PyObject *arg) {
    PyObject *rec = self->rec;
    if (rec == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    if (arg != NULL && arg != Py_None) {
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
        return NULL;
    }
    self->rec = NULL;
    self->started = 1;
    return rec;
}

static PyObject *AioReady_next(AioReady *self) {
    PyObject *rec = aio_ready_take(self, NULL);
    return rec == NULL ? NULL : aio_ready_stop(rec);
}

#if PY_VERSION_HEX >= 0x030A0000
static PySendResult AioReady_am_send(AioReady *self, PyObject *arg, PyObject **result) {
    PyObject *rec = aio_ready_take(self, arg);
    if (rec == NULL) {
        *result = NULL;
        return PYGEN_ERROR;
    }
    *result = rec; /* (the reference moves to the caller) */
    return PYGEN_RETURN;
}
#endif

static PyObject *AioReady_send(AioReady *self, PyObject *arg) {
    PyObject *rec = aio_ready_take(self, arg);
    return rec == NULL ? NULL : aio_ready_stop(rec);
}

static PyObject *AioReady_throw(AioReady *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_CLEAR(self->rec);
    self->started = 1;
    return aio_throw_args(args, nargs);
}

static PyObject *AioReady_close(AioReady *self, PyObject *unused) {
    (void)unused;
    Py_CLEAR(self->rec);
    self->started = 1;
    Py_RETURN_NONE;
}

static PyObject *AioReady_await(PyObject *self) { return Py_NewRef(self); }

static PyObject *AioReady_none(PyObject *self, void *closure) {
    (void)self;
    (void)closure;
    Py_RETURN_NONE;
}

static PyObject *AioReady_false(PyObject *self, void *closure) {
    (void)self;
    (void)closure;
    Py_RETURN_FALSE;
}

static PyObject *AioReady_name(PyObject *self, void *closure) {
    (void)self;
    return PyUnicode_FromString(closure == NULL ? "send" : "AsyncProducer.send");
}

static PyMethodDef AioReady_methods[] = {
    {"send", (PyCFunction)AioReady_send, METH_O, "send(None): finishes with the record's future (StopIteration)."},
    {"throw", (PyCFunction)(void (*)(void))AioReady_throw, METH_FASTCALL, "throw(exc): raises exc."},
    {"close", (PyCFunction)AioReady_close, METH_NOARGS, "close(): finishes it (no warning when never awaited)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef AioReady_getset[] = {
    {"cr_await", AioReady_none, NULL, NULL, NULL},
    {"cr_frame", AioReady_none, NULL, NULL, NULL},
    {"cr_code", AioReady_none, NULL, NULL, NULL},
    {"cr_running", AioReady_false, NULL, NULL, NULL},
    {"__name__", AioReady_name, NULL, NULL, NULL},
    {"__qualname__", AioReady_name, NULL, NULL, (void *)"q"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyAsyncMethods AioReady_async = {
    .am_await = (unaryfunc)AioReady_await,
#if PY_VERSION_HEX >= 0x030A0000
    .am_send = (sendfunc)AioReady_am_send,
#endif
};

static PyTypeObject AioReadyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproducer.protocol._speedups.AioReady",
    .tp_basicsize = sizeof(AioReady),
    .tp_dealloc = (destructor)AioReady_dealloc,
    /* not tracked by the cyclic GC: it refers only to a record future, which is not either */
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What AsyncProducer.send() returns when it staged the record at once: a finished coroutine whose "
              "await gives the record's future.",
    .tp_iternext = (iternextfunc)AioReady_next,
    .tp_methods = AioReady_methods,
    .tp_getset = AioReady_getset,
    .tp_as_async = &AioReady_async,
};

/* AioSendMethod(func): the descriptor AsyncProducer.send (SendMethod's layout and descriptor behaviour) */

static PyObject *AioSendMethod_vectorcall(SendMethod *self, PyObject *const *args, size_t nargsf,
                                          PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    /* send(self, topic, value=None, key=None, *, partition=None, timestamp_ms=None, headers=None) */
    if (aio_run_type != NULL && nargs >= 2 && nargs <= 4 && nargs + nkw <= 7) {
        PyObject *a[6] = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None};
        for (Py_ssize_t i = 1; i < nargs; i++) a[i - 1] = args[i];
        for (Py_ssize_t j = 0; j < nkw; j++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, j);
            int k = -1;
            for (int n = 0; n < 6 && k < 0; n++)
                if (aio_send_kwnames[n] == name) k = n;
            if (k < nargs - 1) goto python; /* unknown (or not interned), or given twice: the Python send() */
            a[k] = args[nargs + j];
        }
        if (a[1] != Py_None && a[2] == Py_None && a[3] == Py_None && a[4] == Py_None && a[5] == Py_None) {
            PyObject *producer = args[0];
            PyObject *hot = PyObject_GetAttr(producer, str_aio_hot), *run = NULL;
            if (hot != NULL) run = PyObject_GetAttr(producer, str_aio_keyless_run);
            if (run == NULL) {
                Py_XDECREF(hot);
                if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
                PyErr_Clear(); /* (not made by AsyncProducer.__init__: the Python send() says what is wrong) */
                goto python;
            }
            PyObject *rec = NULL;
            if (Py_TYPE(hot) == &AioHotType) {
                PyObject *sa[4] = {hot, run, a[0], a[1]};
                rec = aio_stage(NULL, sa, 4);
            } else {
                rec = Py_NewRef(Py_None);
            }
            Py_DECREF(hot);
            Py_DECREF(run);
            if (rec == NULL) return NULL;
            if (rec != Py_None) {
                AioReady *ready = PyObject_New(AioReady, &AioReadyType);
                if (ready == NULL) {
                    Py_DECREF(rec);
                    return NULL;
                }
                ready->rec = rec;
                ready->started = 0;
                return (PyObject *)ready;
            }
            Py_DECREF(rec);
        }
    }
python:
    return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
}

static int AioSendMethod_init(SendMethod *self, PyObject *args, PyObject *kwds) {
    PyObject *func;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "O:AioSendMethod", &func)) return -1;
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "AioSendMethod(func): func must be callable");
        return -1;
    }
    Py_XSETREF(self->func, Py_NewRef(func));
    self->vectorcall = (vectorcallfunc)AioSendMethod_vectorcall;
    return 0;
}

static PyObject *AioSendMethod_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    (void)args;
    (void)kwds;
    SendMethod *self = (SendMethod *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = (vectorcallfunc)AioSendMethod_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject AioSendMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.AioSendMethod",
    .tp_basicsize = sizeof(SendMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "AsyncProducer.send: a call that stages its record at once returns a finished coroutine (AioReady); "
              "others call __func__.",
    .tp_new = AioSendMethod_new,
    .tp_init = (initproc)AioSendMethod_init,
    .tp_dealloc = (destructor)SendMethod_dealloc,
    .tp_traverse = (traverseproc)SendMethod_traverse,
    .tp_clear = (inquiry)SendMethod_clear,
    .tp_descr_get = SendMethod_get,
    .tp_call = (ternaryfunc)SendMethod_call_func,
    .tp_vectorcall_offset = offsetof(SendMethod, vectorcall),
    .tp_dictoffset = offsetof(SendMethod, dict),
    .tp_members = SendMethod_members,
    .tp_getset = SendMethod_getset,
};

/* aio_nogc(RecordFuture): make the instances of RecordFuture (a Python subclass of AioFuture with no __dict__
 * or __weakref__ of its own; since 3.11 every class made by a class statement is a GC type) plain, non-GC
 * objects, as AioFuture's are. Untracking alone is not enough: the collector counts every allocation of a GC
 * type (untracked or not) toward its next collection, so 100k futures kept in a list meant ~140 collections,
 * and a full one walking that list (7-9 ms of loop stall). Safe: a RecordFuture refers only to its run, and
 * what could lead back to it (a run's watchers, a waiting task) is dropped once the record is settled -- the
 * reason aio_stage already untracked its futures. Call once, before the first instance is made. */
static PyObject *aio_nogc(PyObject *mod, PyObject *arg) {
    (void)mod;
    if (!PyType_Check(arg) || !PyType_IsSubtype((PyTypeObject *)arg, &AioFutureType)) {
        PyErr_SetString(PyExc_TypeError, "aio_nogc() takes a subclass of AioFuture");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)arg;
    if ((tp->tp_flags & Py_TPFLAGS_HAVE_GC) && (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) && tp->tp_base == &AioFutureType &&
        tp->tp_basicsize == AioFutureType.tp_basicsize && tp->tp_itemsize == 0 && tp->tp_dictoffset == 0 &&
        tp->tp_weaklistoffset == 0 && tp->tp_is_gc == NULL && tp->tp_free == PyObject_GC_Del) {
        tp->tp_flags &= ~Py_TPFLAGS_HAVE_GC;
        tp->tp_free = PyObject_Free;
        PyType_Modified(tp);
        Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

/* Awaiting done records in a loop (``for f in futs: await f``) never suspends, so a task awaiting 100k of them,
 * done meanwhile, would hold the loop for tens of ms. Every 32nd compiled await reads the monotonic clock; when
 * the task ran for aio_yield_s since it last yielded (or since it came back to the loop: a gap longer than that
 * between two checks means it was suspended), that await yields to the loop once (a bare yield, as
 * asyncio.sleep(0)) before it gives the metadata. Set from aio.YIELD_AFTER_S by aio_yield_after(). */
static double aio_yield_s = 0.001, aio_yield_deadline, aio_yield_last;
static unsigned aio_await_n;

/* 1 when the compiled await of a done record should yield to the loop once first (see above), else 0. */
static int aio_await_yield(void) {
    if ((++aio_await_n & 31) != 0) return 0;
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9, last = aio_yield_last;
    aio_yield_last = now;
    if (now - last > aio_yield_s) { /* (suspended since the last check: a fresh step) */
        aio_yield_deadline = now + aio_yield_s;
        return 0;
    }
    if (now < aio_yield_deadline) return 0;
    aio_yield_deadline = now + aio_yield_s;
    return 1;
}

/* aio_yield_after(seconds): how long awaiting done records may run before one of them yields (aio.YIELD_AFTER_S) */
static PyObject *aio_yield_after(PyObject *mod, PyObject *arg) {
    (void)mod;
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    if (!(v > 0)) {
        PyErr_SetString(PyExc_ValueError, "aio_yield_after(seconds): seconds must be > 0");
        return NULL;
    }
    aio_yield_s = v;
    Py_RETURN_NONE;
}

static int aiosend_module_init(PyObject *mod) {
    static const char *names[6] = {"topic", "value", "key", "partition", "timestamp_ms", "headers"};
    for (int i = 0; i < 6; i++) {
        aio_send_kwnames[i] = PyUnicode_InternFromString(names[i]);
        if (aio_send_kwnames[i] == NULL) return -1;
    }
    if ((str_aio_hot = PyUnicode_InternFromString("_hot")) == NULL ||
        (str_aio_keyless_run = PyUnicode_InternFromString("_keyless_run")) == NULL)
        return -1;
    if (PyType_Ready(&AioReadyType) < 0 || PyType_Ready(&AioSendMethodType) < 0)
        return -1;
    Py_INCREF(&AioReadyType);
    if (PyModule_AddObject(mod, "AioReady", (PyObject *)&AioReadyType) < 0) {
        Py_DECREF(&AioReadyType);
        return -1;
    }
    Py_INCREF(&AioSendMethodType);
    if (PyModule_AddObject(mod, "AioSendMethod", (PyObject *)&AioSendMethodType) < 0) {
        Py_DECREF(&AioSendMethodType);
        return -1;
    }
    return 0;
}


/* ---------------------------------------------------------------------------------------------
 * Keyless bulk appends (AsyncProducer._flush_staged, send_batch): the sticky partitioner's cut over records,
 * summed here instead of listing their sizes (partitioner.StickyPartitioner.record_runs / _runs).
 */

static inline int cut_len(PyObject *o, Py_ssize_t *out) {
    if (PyBytes_CheckExact(o)) {
        *out = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (o == Py_None) {
        *out = 0;
        return 0;
    }
    *out = PyObject_Size(o);
    return *out < 0 ? -1 : 0;
}

/* sticky_cut(values, keys, overhead, start, budget) -> (stop, used): records start, start+1, ... each of
 * overhead + len(key) + len(value) bytes (None: 0; keys None: no keys), up to and including the first whose
 * running total reaches budget: (its index + 1, the total); (len(values), total) when the total stays below. */
static PyObject *sticky_cut(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "sticky_cut(values, keys, overhead, start, budget)");
        return NULL;
    }
    Py_ssize_t overhead = PyLong_AsSsize_t(args[2]), start = PyLong_AsSsize_t(args[3]);
    long long budget = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    PyObject *values = PySequence_Fast(args[0], "sticky_cut(): values must be a sequence");
    if (values == NULL) return NULL;
    PyObject *keys = NULL;
    if (args[1] != Py_None && (keys = PySequence_Fast(args[1], "sticky_cut(): keys must be a sequence")) == NULL) {
        Py_DECREF(values);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if (keys != NULL && PySequence_Fast_GET_SIZE(keys) < n) {
        PyErr_SetString(PyExc_ValueError, "sticky_cut(): fewer keys than values");
        goto fail;
    }
    if (start < 0) start = 0;
    PyObject **vs = PySequence_Fast_ITEMS(values), **ks = keys != NULL ? PySequence_Fast_ITEMS(keys) : NULL;
    long long used = 0;
    Py_ssize_t i = start;
    while (i < n) {
        Py_ssize_t vl, kl = 0;
        if (cut_len(vs[i], &vl) < 0 || (ks != NULL && cut_len(ks[i], &kl) < 0)) goto fail;
        used += overhead + vl + kl;
        i++;
        if (used >= budget) break;
    }
    Py_DECREF(values);
    Py_XDECREF(keys);
    return Py_BuildValue("(nL)", i, used);
fail:
    Py_DECREF(values);
    Py_XDECREF(keys);
    return NULL;
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

/* ---------------------------------------------------------------------------------------------
 * The sender's bookkeeping per produce request (twins in kproducer/producer/metrics.py and buffer_pool.py).
 */

static PyObject *str_builder, *str_estimated_size, *str_drained_ms, *str_created_ms, *str_topic, *str_count_attr,
    *str_len_attr, *str_max_rec_attr;

static int attr_longlong(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int attr_double(PyObject *o, PyObject *name, double *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

typedef struct {
    long long records, bytes, batches;
    double ratio_sum, ratio_max;
} topic_stats;

/* one batch of produce_request_stats: its figures (*topic: a new reference) */
static int batch_stats(PyObject *b, long long *n, long long *size, long long *len, long long *max_rec, double *queued,
                       PyObject **topic) {
    PyObject *builder = PyObject_GetAttr(b, str_builder);
    if (builder == NULL) return -1;
    int rc = 0;
    if (PyObject_TypeCheck(builder, &RecordsBufferType)) {
        RecordsBuffer *rb = (RecordsBuffer *)builder;
        *n = rb->count;
        *len = rb->len;
        *max_rec = rb->max_rec;
    } else {
        rc = (attr_longlong(builder, str_count_attr, n) < 0 || attr_longlong(builder, str_len_attr, len) < 0 ||
              attr_longlong(builder, str_max_rec_attr, max_rec) < 0) ? -1 : 0;
    }
    Py_DECREF(builder);
    if (rc < 0) return -1;
    PyObject *sz = PyObject_CallMethodNoArgs(b, str_estimated_size); /* (what drain packs by) */
    if (sz == NULL) return -1;
    *size = PyLong_AsLongLong(sz);
    Py_DECREF(sz);
    if (*size == -1 && PyErr_Occurred()) return -1;
    double drained, created;
    if (attr_double(b, str_drained_ms, &drained) < 0 || attr_double(b, str_created_ms, &created) < 0) return -1;
    *queued = drained - created;
    *topic = PyObject_GetAttr(b, str_topic);
    return *topic == NULL ? -1 : 0;
}

/*
 * produce_request_stats(batches) -> (records, batches, size_sum, size_max, ratio_sum, ratio_max, queue_sum,
 * queue_max, record_size_sum, record_size_max, record_size_count, per_topic): the figures
 * ProducerMetrics.record_produce_request records of one produce request's batches; per_topic maps a topic to
 * [records, bytes, ratio sum, ratio max, batches]. Twin (which says what each is): metrics._request_stats_py.
 */
static PyObject *produce_request_stats(PyObject *module, PyObject *batches) {
    PyObject *seq = PySequence_Fast(batches, "produce_request_stats(batches): batches must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    long long records = 0, count = 0, size_sum = 0, size_max = 0, rsize_sum = 0, rsize_max = 0, rsize_count = 0;
    double ratio_sum = 0.0, ratio_max = -INFINITY, queue_sum = 0.0, queue_max = -INFINITY;
    PyObject *topics = PyList_New(0); /* the topics in order of appearance; their figures in ts[] */
    topic_stats *ts = nb > 0 ? PyMem_Calloc((size_t)nb, sizeof(topic_stats)) : NULL;
    PyObject *result = NULL;
    if (topics == NULL || (nb > 0 && ts == NULL)) {
        if (ts == NULL && nb > 0) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        long long n, size, len, max_rec;
        double queued;
        PyObject *topic;
        if (batch_stats(PySequence_Fast_GET_ITEM(seq, i), &n, &size, &len, &max_rec, &queued, &topic) < 0) goto done;
        long long raw = 61 + len;
        double ratio = raw > 0 ? (double)size / (double)raw : 1.0;
        if (n) {
            long long largest = max_rec + 61;
            rsize_sum += largest;
            rsize_count++;
            if (largest > rsize_max) rsize_max = largest;
        }
        if (queued < 0.0) queued = 0.0;
        records += n;
        count++;
        size_sum += size;
        if (size > size_max) size_max = size;
        ratio_sum += ratio;
        if (ratio > ratio_max) ratio_max = ratio;
        queue_sum += queued;
        if (queued > queue_max) queue_max = queued;
        Py_ssize_t t = 0, nt = PyList_GET_SIZE(topics);
        for (; t < nt; t++) {
            int eq = PyObject_RichCompareBool(PyList_GET_ITEM(topics, t), topic, Py_EQ);
            if (eq < 0) {
                Py_DECREF(topic);
                goto done;
            }
            if (eq) break;
        }
        if (t == nt) {
            int rc = PyList_Append(topics, topic);
            Py_DECREF(topic);
            if (rc < 0) goto done;
            ts[t].records = n;
            ts[t].bytes = size;
            ts[t].ratio_sum = ts[t].ratio_max = ratio;
            ts[t].batches = 1;
        } else {
            Py_DECREF(topic);
            ts[t].records += n;
            ts[t].bytes += size;
            ts[t].ratio_sum += ratio;
            if (ratio > ts[t].ratio_max) ts[t].ratio_max = ratio;
            ts[t].batches++;
        }
    }
    PyObject *per_topic = PyDict_New();
    if (per_topic == NULL) goto done;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(topics); t++) {
        PyObject *figures = Py_BuildValue("[LLddL]", ts[t].records, ts[t].bytes, ts[t].ratio_sum, ts[t].ratio_max,
                                          ts[t].batches);
        if (figures == NULL || PyDict_SetItem(per_topic, PyList_GET_ITEM(topics, t), figures) < 0) {
            Py_XDECREF(figures);
            Py_DECREF(per_topic);
            goto done;
        }
        Py_DECREF(figures);
    }
    result = Py_BuildValue("(LLLLddddLLLN)", records, count, size_sum, size_max, ratio_sum, ratio_max, queue_sum,
                           queue_max, rsize_sum, rsize_max, rsize_count, per_topic);
done:
    PyMem_Free(ts);
    Py_XDECREF(topics);
    Py_DECREF(seq);
    return result;
}

/* bytearray_exported(buf) -> bool: whether something holds a view of the bytearray (twin:
   buffer_pool._in_use_py, which finds out by trying to resize it) */
static PyObject *bytearray_exported(PyObject *module, PyObject *buf) {
    if (!PyByteArray_Check(buf)) {
        PyErr_Format(PyExc_TypeError, "bytearray_exported() takes a bytearray, not %.100s", Py_TYPE(buf)->tp_name);
        return NULL;
    }
    /* (an empty one is never in use, as for the twin, which cannot shrink it to find out) */
    return PyBool_FromLong(PyByteArray_GET_SIZE(buf) > 0 && ((PyByteArrayObject *)buf)->ob_exports > 0);
}

/*
 * SensorBase: the recording half of metrics.Sensor (Java's SampledStat windows plus lifetime totals), the samples
 * in C arrays. Twin: metrics._SensorPy, which says what each sample holds; _samples gives them in its shape
 * ([start_ms, last_event_ms, event_count, sum, max] each, a copy).
 */
typedef struct {
    double start, last, sum, max;
    long long events;
} sample_t;

typedef struct {
    PyObject_HEAD
    PyObject *config;
    Py_ssize_t nslots; /* samples + 1 */
    double window_ms, samples;
    Py_ssize_t used, current;
    sample_t *slot;
    double total;
    long long count;
} SensorBase;

static PyObject *str_samples_attr, *str_window_ms_attr;

static int SensorBase_init(SensorBase *self, PyObject *args, PyObject *kwds) {
    PyObject *config;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Sensor(config) takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O", &config)) return -1;
    long long samples;
    double window;
    if (attr_longlong(config, str_samples_attr, &samples) < 0 || attr_double(config, str_window_ms_attr, &window) < 0)
        return -1;
    if (samples < 1 || samples > 1000000) {
        PyErr_Format(PyExc_ValueError, "a sensor needs 1 to 1000000 samples, not %lld", samples);
        return -1;
    }
    sample_t *slot = PyMem_Calloc((size_t)samples + 1, sizeof(sample_t));
    if (slot == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyMem_Free(self->slot);
    self->slot = slot;
    Py_INCREF(config);
    Py_XSETREF(self->config, config);
    self->nslots = (Py_ssize_t)samples + 1;
    self->samples = (double)samples;
    self->window_ms = window;
    self->used = self->current = 0;
    self->total = 0.0;
    self->count = 0;
    return 0;
}

static void SensorBase_dealloc(SensorBase *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyMem_Free(self->slot);
    Py_CLEAR(self->config);
    tp->tp_free((PyObject *)self);
}

static inline void sensor_reset_slot(sample_t *s, double now) {
    s->start = s->last = now;
    s->events = 0;
    s->sum = 0.0;
    s->max = -INFINITY;
}

static void sensor_record(SensorBase *self, double total, long long count, double largest, double now) {
    if (self->slot == NULL) return; /* (not initialized: nothing to record into) */
    if (self->used == 0) {
        sensor_reset_slot(&self->slot[0], now);
        self->used = 1;
    }
    sample_t *s = &self->slot[self->current];
    if (now - s->start >= self->window_ms) { /* the next window: a new slot, or the oldest one reused */
        self->current = (self->current + 1) % self->nslots;
        if (self->current >= self->used) self->used = self->current + 1;
        s = &self->slot[self->current];
        sensor_reset_slot(s, now);
    }
    s->last = now;
    s->events += count;
    s->sum += total;
    if (largest > s->max) s->max = largest;
    self->total += total;
    self->count += count;
}

/* record(value, now) */
static PyObject *SensorBase_record(SensorBase *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "record(value, now)");
        return NULL;
    }
    double value = PyFloat_AsDouble(args[0]), now = PyFloat_AsDouble(args[1]);
    if ((value == -1.0 || now == -1.0) && PyErr_Occurred()) return NULL;
    sensor_record(self, value, 1, value, now);
    Py_RETURN_NONE;
}

/* record_many(total, count, largest, now) */
static PyObject *SensorBase_record_many(SensorBase *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "record_many(total, count, largest, now)");
        return NULL;
    }
    double total = PyFloat_AsDouble(args[0]), largest = PyFloat_AsDouble(args[2]), now = PyFloat_AsDouble(args[3]);
    long long count = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    sensor_record(self, total, count, largest, now);
    Py_RETURN_NONE;
}

/* _purge(now): samples whose last event is older than the monitored window start again (Java's
   purgeObsoleteSamples) */
static PyObject *SensorBase_purge(SensorBase *self, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    double expire = self->samples * self->window_ms;
    for (Py_ssize_t i = 0; i < self->used; i++) {
        if (now - self->slot[i].last >= expire) sensor_reset_slot(&self->slot[i], now);
    }
    Py_RETURN_NONE;
}

static PyObject *SensorBase_get_samples(SensorBase *self, void *closure) {
    PyObject *out = PyList_New(self->used);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->used; i++) {
        sample_t *s = &self->slot[i];
        PyObject *item = Py_BuildValue("[ddLdd]", s->start, s->last, s->events, s->sum, s->max);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyMethodDef SensorBase_methods[] = {
    {"record", (PyCFunction)(void (*)(void))SensorBase_record, METH_FASTCALL, "record(value, now): one value."},
    {"record_many", (PyCFunction)(void (*)(void))SensorBase_record_many, METH_FASTCALL,
     "record_many(total, count, largest, now): count values at one time, in one step."},
    {"_purge", (PyCFunction)SensorBase_purge, METH_O, "Restart the samples older than the monitored window."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SensorBase_members[] = {
    {"_config", T_OBJECT, offsetof(SensorBase, config), READONLY, "the MetricConfig"},
    {"_current", T_PYSSIZET, offsetof(SensorBase, current), READONLY, "the sample being recorded into"},
    {"total", T_DOUBLE, offsetof(SensorBase, total), READONLY, "lifetime sum of the recorded values"},
    {"count", T_LONGLONG, offsetof(SensorBase, count), READONLY, "lifetime number of recorded values"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef SensorBase_getset[] = {
    {"_samples", (getter)SensorBase_get_samples, NULL, "the samples in use, oldest slot first (a copy)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SensorBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.protocol._speedups.SensorBase",
    .tp_basicsize = sizeof(SensorBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The recording half of a metrics sensor (compiled base of metrics.Sensor).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SensorBase_init,
    .tp_dealloc = (destructor)SensorBase_dealloc,
    .tp_methods = SensorBase_methods,
    .tp_members = SensorBase_members,
    .tp_getset = SensorBase_getset,
};

static int bookkeeping_module_init(void) {
    return ((str_builder = PyUnicode_InternFromString("builder")) == NULL ||
            (str_estimated_size = PyUnicode_InternFromString("estimated_size")) == NULL ||
            (str_drained_ms = PyUnicode_InternFromString("drained_ms")) == NULL ||
            (str_created_ms = PyUnicode_InternFromString("created_ms")) == NULL ||
            (str_topic = PyUnicode_InternFromString("topic")) == NULL ||
            (str_count_attr = PyUnicode_InternFromString("_count")) == NULL ||
            (str_len_attr = PyUnicode_InternFromString("_len")) == NULL ||
            (str_max_rec_attr = PyUnicode_InternFromString("_max_rec")) == NULL ||
            (str_samples_attr = PyUnicode_InternFromString("samples")) == NULL ||
            (str_window_ms_attr = PyUnicode_InternFromString("window_ms")) == NULL ||
            PyType_Ready(&SensorBaseType) < 0) ? -1 : 0;
}

static PyMethodDef methods[] = {
    {"aio_nogc", aio_nogc, METH_O, "Make RecordFuture's instances non-GC objects (once, at import)."},
    {"aio_yield_after", aio_yield_after, METH_O, "How long awaiting done records may run before one yields."},
    {"sticky_cut", (PyCFunction)(void (*)(void))sticky_cut, METH_FASTCALL,
     "The sticky partitioner's cut: (stop, bytes) of the records from start until their bytes reach budget."},
    {"aio_setup", (PyCFunction)(void (*)(void))aio_setup, METH_FASTCALL,
     "Give the asyncio record future's compiled await aio.py's types (once, at import)."},
    {"aio_stage", (PyCFunction)(void (*)(void))aio_stage, METH_FASTCALL,
     "AsyncProducer.send()'s hot path: stage one more keyless record; None when it does not apply."},
    {"murmur2", murmur2, METH_O, "Kafka's murmur2 hash of a bytes-like object (signed 32-bit)."},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_FASTCALL, "CRC32C (Castagnoli) of data."},
    {"produce_request_stats", (PyCFunction)produce_request_stats, METH_O,
     "The metrics' figures of a produce request's batches."},
    {"bytearray_exported", (PyCFunction)bytearray_exported, METH_O,
     "Whether something holds a view of the bytearray."},
    {"encode_produce_request", (PyCFunction)(void (*)(void))encode_produce_request, METH_FASTCALL,
     "A Produce request body as buffers (as ProduceApi._encode_request_parts, the same bytes); None otherwise."},
    {"decode_produce_response", (PyCFunction)(void (*)(void))decode_produce_response, METH_FASTCALL,
     "A Produce response body in its common case (as ProduceApi._decode_response_fast); None otherwise."},
    {"extend_columns", (PyCFunction)(void (*)(void))extend_columns, METH_FASTCALL,
     "Append rows of binary columns to a batch until it is full; returns the next position."},
    {"column_max_length", column_max_length, METH_O, "Length of the longest non-null row of a binary column."},
#ifdef HAVE_NET_IO
    {"epoll_wait_io", (PyCFunction)(void (*)(void))epoll_wait_io, METH_FASTCALL,
     "epoll_wait(epfd, timeout_ms, maxevents) -> [(fd, selectors mask)]; the GIL is given up only to wait."},
    {"sendmsg_nogil", (PyCFunction)(void (*)(void))sendmsg_nogil, METH_FASTCALL,
     "One sendmsg() of a list of buffers on a non-blocking socket, holding the GIL; bytes written."},
    {"recv_into_nogil", (PyCFunction)(void (*)(void))recv_into_nogil, METH_FASTCALL,
     "One recv() into a writable buffer on a non-blocking socket, holding the GIL; bytes read."},
#endif
    {"bytes_longest", bytes_longest, METH_O,
     "Length of the longest item of a sequence of bytes or None; -1 if another type is there."},
    {"column_partitions", (PyCFunction)(void (*)(void))column_partitions, METH_FASTCALL,
     "Rows of a key column grouped by murmur2 partition, and the rows with a null key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Compiled hot paths of kproducer (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    crc_zeros_init(crc_zeros_long, CRC_LONG);
    crc_zeros_init(crc_zeros_short, CRC_SHORT);
#endif
    str_try_append_py = PyUnicode_InternFromString("_try_append_py");
    if (str_try_append_py == NULL) return NULL;
    if (PyType_Ready(&RecordsBufferType) < 0 || PyType_Ready(&FutureBaseType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    Py_INCREF(&RecordsBufferType);
    if (PyModule_AddObject(mod, "RecordsBuffer", (PyObject *)&RecordsBufferType) < 0) {
        Py_DECREF(&RecordsBufferType);
        Py_DECREF(mod);
        return NULL;
    }
    Py_INCREF(&FutureBaseType);
    if (PyModule_AddObject(mod, "FutureBase", (PyObject *)&FutureBaseType) < 0) {
        Py_DECREF(&FutureBaseType);
        Py_DECREF(mod);
        return NULL;
    }
    if (fastsend_module_init(mod) < 0 || aio_module_init(mod) < 0 || aiosend_module_init(mod) < 0 ||
        produce_response_module_init() < 0 || bookkeeping_module_init() < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    Py_INCREF(&SensorBaseType);
    if (PyModule_AddObject(mod, "SensorBase", (PyObject *)&SensorBaseType) < 0) {
        Py_DECREF(&SensorBaseType);
        Py_DECREF(mod);
        return NULL;
    }
    if (PyModule_AddIntConstant(mod, "HW_CRC32C", use_hw_crc) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
