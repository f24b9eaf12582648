/*
 * kproducer.protocol._records' C API: what a higher layer's compiled module (producer/_send.c) uses of the
 * record encoder, through a PyCapsule (CPython's pattern for one extension module calling another: "Providing
 * a C API for an Extension Module"). The table is exported by the lower module; protocol/ includes nothing
 * from above it.
 *
 * A user: includes this header, calls kp_records_import() in its PyInit (an ImportError when _records is not
 * there: that module is then unavailable too, and its layer runs its pure-Python twin), then uses
 * RecordsBufferType, check_buffer(), append_one() and murmur2_positive() as if they were its own.
 */
#ifndef KPRODUCER_RECORDS_H
#define KPRODUCER_RECORDS_H

#include "_ccommon.h"

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

#define KP_RECORDS_API_VERSION 1
#define KP_RECORDS_CAPSULE "kproducer.protocol._records._C_API"

typedef struct {
    int version; /* KP_RECORDS_API_VERSION: a user built against another table refuses to load */
    PyTypeObject *RecordsBuffer_Type;
    /* 0 when its _buf is a bytearray, else -1 with a TypeError set */
    int (*check_buffer)(RecordsBuffer *self);
    /* one record into the buffer: 1 appended, 0 it does not fit, -1 with an exception set */
    int (*append_one)(RecordsBuffer *self, PyObject *ts_obj, long long ts, PyObject *key, PyObject *value,
                      PyObject *headers);
    /* Kafka's murmur2 of the bytes, made positive (& 0x7fffffff) */
    long long (*murmur2_positive)(const unsigned char *data, Py_ssize_t length);
} KPRecordsAPI;

#ifndef KPRODUCER_RECORDS_MODULE
static KPRecordsAPI *kp_records_api;

static int kp_records_import(void) {
    /* (the module first: PyCapsule_Import imports only the top package, then looks up the rest as attributes;
       an ImportError when _records is not built) */
    PyObject *records = PyImport_ImportModule("kproducer.protocol._records");
    if (records == NULL) return -1;
    Py_DECREF(records);
    kp_records_api = (KPRecordsAPI *)PyCapsule_Import(KP_RECORDS_CAPSULE, 0);
    if (kp_records_api == NULL) return -1;
    if (kp_records_api->version != KP_RECORDS_API_VERSION) {
        kp_records_api = NULL;
        PyErr_SetString(PyExc_ImportError, "kproducer.protocol._records has another C API version");
        return -1;
    }
    return 0;
}

#define RecordsBufferType (*kp_records_api->RecordsBuffer_Type)
#define check_buffer (kp_records_api->check_buffer)
#define append_one (kp_records_api->append_one)
#define murmur2_positive (kp_records_api->murmur2_positive)
#endif

#endif /* KPRODUCER_RECORDS_H */
