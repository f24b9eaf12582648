/*
 * Optional compiled accelerator of kproducer's producer layer: send()'s common case and the sender's
 * bookkeeping.
 *
 * Everything here has a pure-Python twin that behaves the same; the Python modules pick this module when it
 * imported and KPRODUCER_PURE_PYTHON is not set (kproducer/protocol/accel.py). It needs
 * kproducer.protocol._records (RecordsBuffer, append_one, murmur2: its C API, ../protocol/_records.h): without
 * it, this module does not import and the producer layer runs its twins. Types:
 *   FutureBase(...)           base class of future.FutureRecordMetadata: the per-record fields
 *                             (twin: future._FutureFieldsPy)
 *   BatchBase()               base class of batch.ProducerBatch: the fields the compiled append uses
 *                             (builder, closed, thunks; twin: batch._BatchFieldsPy)
 *   FastSend(...)             a Producer's ``_fast``: what send()'s compiled common case reads
 *   SendMethod(func)          the class attribute Producer.send: its plain calls run the producer's FastSend,
 *                             every other call the Python send() (twin: that Python send() alone)
 *   SensorBase(config)        the recording half of metrics.Sensor (twin: metrics._SensorPy)
 * Functions:
 *   sticky_cut                (twin: partitioner.StickyPartitioner's Python cut)
 *   produce_request_stats     (twin: metrics._request_stats_py)
 *   bytearray_exported        (twin: buffer_pool._in_use_py)
 */
#include "../protocol/_records.h"
#include "_sendmethod.h"

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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.producer._send.FutureBase",
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
 * BatchBase: the fields of a batch that the compiled append reads and writes (base class of
 * batch.ProducerBatch, which declares its other fields as __slots__; twin: batch._BatchFieldsPy). FastSend
 * reads them here, through this struct, instead of by the offsets of Python slots.
 */

typedef struct {
    PyObject_HEAD
    PyObject *builder; /* the RecordBatchBuilder (a RecordsBuffer) the records are appended to */
    PyObject *closed;  /* True: no more appends */
    PyObject *thunks;  /* [(callback, future)], None once the batch completed */
} BatchBase;

static int BatchBase_traverse(BatchBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->builder);
    Py_VISIT(self->closed);
    Py_VISIT(self->thunks);
    return 0;
}

static int BatchBase_clear(BatchBase *self) {
    Py_CLEAR(self->builder);
    Py_CLEAR(self->closed);
    Py_CLEAR(self->thunks);
    return 0;
}

static void BatchBase_dealloc(BatchBase *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    BatchBase_clear(self);
    tp->tp_free((PyObject *)self);
}

static PyMemberDef BatchBase_members[] = {
    {"builder", T_OBJECT_EX, offsetof(BatchBase, builder), 0, "the records' builder"},
    {"closed", T_OBJECT_EX, offsetof(BatchBase, closed), 0, "no more appends"},
    {"thunks", T_OBJECT_EX, offsetof(BatchBase, thunks), 0, "the (callback, future) pairs to complete"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BatchBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.producer._send.BatchBase",
    .tp_basicsize = sizeof(BatchBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Fields of a batch that the compiled append uses (compiled base of ProducerBatch).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)BatchBase_dealloc,
    .tp_traverse = (traverseproc)BatchBase_traverse,
    .tp_clear = (inquiry)BatchBase_clear,
    .tp_members = BatchBase_members,
};
/* ---------------------------------------------------------------------------------------------
 * FastSend and SendMethod: Producer.send()'s common case in compiled code
 *
 * FastSend(...) holds what send() reads (built by Producer.__init__ as its ``_fast`` when the producer's
 * settings allow the fast path); SendMethod(func) is the class attribute Producer.send: a method descriptor
 * (called without a bound-method object, as a def would be) that runs the plain case of a record through
 * the producer's FastSend and hands every other call, unchanged, to ``func`` (the Python send(), the one
 * implementation of the rules). The plain case: an open producer without a fatal error, a str topic whose
 * partition count is known and was touched within the last second, bytes/None key and value, no headers,
 * a valid or no explicit partition and timestamp, a record within max.request.size. It is appended to the
 * partition's last open batch; when that has no room (or there is none), Producer._open_batch queues it (the
 * part of the Python send() after its checks: the accumulator's append, which opens the batch, and the wakeup).
 * Nothing is changed before the record is known to take this path, except the key-hash cache (as key_hash_miss
 * does); anything else falls back before any effect.
 */

#if PY_VERSION_HEX < 0x030C0000
/* a dict's version tag (PEP 509): changed by every change to the dict, on CPython 3.6-3.11 */
#define HAVE_DICT_VERSION 1
#define DICT_VERSION(d) (((PyDictObject *)(d))->ma_version_tag)
#endif

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
    int lock_sem;            /* ... and whose PyThread lock is a semaphore, taken with sem_trywait */
    PyObject *hash_cache;    /* {key: positive murmur2} */
    PyObject *sticky;        /* StickyPartitioner (next_partition, limit) */
    PyObject *sticky_state;  /* its state: {topic: [partition, bytes, limit]} */
    PyObject *topic_touched; /* the producer's {topic: monotonic ms of the last add_topic} */
    PyTypeObject *future_type;
    PyTypeObject *batch_type;
    PyObject *monotonic_ms;  /* None: the system clock, read here */
    PyObject *wall_ms;
    long long max_request_size;
    long long record_overhead;
    long long bound_extra;
    Py_ssize_t hash_cache_size;
    double touch_ms;
    int ignore_keys;
    long long hits; /* records queued by the fast path into an open batch */
    PyObject *open_batch;    /* Producer._open_batch (unbound; called with the producer) or None: see fast_send() */
    long long opened; /* records handed to open_batch (the partition had no open batch with room) */
    PyObject *gate;          /* the flag of the producer's core.Gate (a bytearray): gate[0] != 0 while the
                                producer is open, has no fatal error and its accumulator takes records; whichever
                                of them closes closes the Gate (one byte read here instead of three attribute
                                lookups per record) */
    PyObject *last_cluster;  /* the cluster seen last, and its partition_counts (a cluster is immutable) */
    PyObject *last_counts;
    PyObject *tp_cache;      /* {topic: ((topic, 0), (topic, 1), ...)}: the batches' keys, made once */
    PyObject *callback_codes; /* future.CALLBACK_CODES: the ids of the code objects of the functions (-id: of
                                 bound methods' functions) known to take (metadata, exception); None: any */
    PyObject *last_code;      /* the code object last found there (held: its address is not reused) */
    int last_code_method;     /* ... of a bound method's function */
    /* The last topic's lookups (see topic_cache_reset()): what send() found for it in the dicts it reads,
       each reused while its source is unchanged: the partition count while the cluster's partition_counts is
       the same dict; with dict version tags (CPython < 3.12: any change to a dict changes its tag) the
       topic's touch time, its sticky state list and its partitions' deques while the dict they came from has
       the tag it had then. A hit reads what a lookup would: the record takes the same path either way. */
    PyObject *c_topic;        /* the topic (held); NULL: nothing cached */
    PyObject *c_counts;       /* the partition_counts c_n was read from (held) */
    long long c_n;
#ifdef HAVE_DICT_VERSION
    int c_touched_ok, c_sticky_ok;
    uint64_t c_touched_ver, c_sticky_ver, c_batches_ver;
    double c_touched;         /* topic_touched[topic] (cached only when found) */
    PyObject *c_sticky;       /* sticky_state[topic] (held; NULL: absent) */
    PyObject **c_dq;          /* batches[(topic, p)] for p < c_dq_n (held; NULL: not looked up, or absent) */
    Py_ssize_t c_dq_n;
#endif
} FastSend;

static PyObject *str_cluster, *str_partition_counts, *str_available,
    *str_next_partition, *str_limit, *str_fast, *str___call__;
static PyObject *send_kwnames[7];


/* forget the cached lookups; with a topic (not NULL), start caching for it, n its partition count read from
   counts */
static void topic_cache_reset(FastSend *fs, PyObject *topic, PyObject *counts, long long n) {
#ifdef HAVE_DICT_VERSION
    fs->c_touched_ok = fs->c_sticky_ok = 0;
    Py_CLEAR(fs->c_sticky);
    if (fs->c_dq != NULL) {
        for (Py_ssize_t i = 0; i < fs->c_dq_n; i++) Py_CLEAR(fs->c_dq[i]);
        PyMem_Free(fs->c_dq);
        fs->c_dq = NULL;
    }
    fs->c_dq_n = 0;
#endif
    Py_XINCREF(topic);
    Py_XSETREF(fs->c_topic, topic);
    Py_XINCREF(counts);
    Py_XSETREF(fs->c_counts, counts);
    fs->c_n = n;
}

static void FastSend_dealloc(FastSend *self) {
    topic_cache_reset(self, NULL, NULL, 0);
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
    Py_CLEAR(self->open_batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/*
 * The accumulator's lock. A Python-level acquire() + release() cost ~90 ns, a fifth of the fast path: a free
 * CPython _thread.lock (3.9-3.12, whose layout is mirrored here and checked when a FastSend is made) is taken
 * and released directly, with the same effect on the lock object as its acquire(False) / release(); a lock
 * held by another thread is waited for through acquire() (which lets other threads run meanwhile). On Linux
 * the lock's PyThread_type_lock is a POSIX semaphore (CPython's thread_pthread.h, USE_SEMAPHORES): when the
 * check finds that (lock_sem), the fast path calls sem_trywait/sem_post itself, because
 * PyThread_acquire_lock_timed reads the monotonic clock for a deadline even when it does not wait (~35 ns
 * of the fast path's ~370 on the benchmark machine).
 */
#if PY_VERSION_HEX < 0x030D0000
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock_lock;
    PyObject *in_weakreflist;
    char locked;
} thread_lock_mirror;
#define HAVE_LOCK_MIRROR 1
#if defined(__linux__)
#include <semaphore.h>
#define HAVE_LOCK_SEM 1
#endif

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

/* 1: the free lock (lock_layout_ok said 1) is a semaphore that sem_trywait/sem_post take and release as
   PyThread_acquire_lock/PyThread_release_lock do; 0: not (or not known) */
static int lock_is_sem(PyObject *lock) {
#ifdef HAVE_LOCK_SEM
    PyThread_type_lock pl = ((thread_lock_mirror *)lock)->lock_lock;
    sem_t *sem = (sem_t *)pl;
    int v = -1;
    /* a free semaphore lock counts 1 (the other implementation's struct starts with its "locked" char: 0) */
    if (sem_getvalue(sem, &v) != 0 || v != 1) return 0;
    if (sem_trywait(sem) != 0) return 0;
    int ok = sem_getvalue(sem, &v) == 0 && v == 0;
    if (PyThread_acquire_lock(pl, NOWAIT_LOCK)) { /* taken by sem_trywait: PyThread must see it taken */
        PyThread_release_lock(pl);
        ok = 0;
    }
    sem_post(sem);
    if (!PyThread_acquire_lock(pl, NOWAIT_LOCK)) return 0; /* (and free again after sem_post) */
    ok = ok && sem_getvalue(sem, &v) == 0 && v == 0;
    PyThread_release_lock(pl);
    return ok && sem_getvalue(sem, &v) == 0 && v == 1;
#else
    (void)lock;
    return 0;
#endif
}

static int fs_lock(FastSend *fs) {
#ifdef HAVE_LOCK_MIRROR
    if (fs->lock_direct) {
        thread_lock_mirror *m = (thread_lock_mirror *)fs->lock;
#ifdef HAVE_LOCK_SEM
        if (fs->lock_sem ? sem_trywait((sem_t *)m->lock_lock) == 0 : PyThread_acquire_lock(m->lock_lock, NOWAIT_LOCK)) {
#else
        if (PyThread_acquire_lock(m->lock_lock, NOWAIT_LOCK)) {
#endif
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
#ifdef HAVE_LOCK_SEM
        if (fs->lock_sem) {
            sem_post((sem_t *)m->lock_lock);
            return 0;
        }
#endif
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
                             "touch_ms", "ignore_keys", "gate", "callback_codes", "open_batch", NULL};
    PyObject *sender, *metadata, *accumulator, *batches, *lock, *hash_cache, *sticky, *topic_touched,
        *monotonic_ms, *wall_ms, *gate, *callback_codes = Py_None, *open_batch = Py_None;
    PyTypeObject *future_type, *batch_type;
    long long max_request_size, record_overhead, bound_extra;
    Py_ssize_t hash_cache_size;
    double touch_ms;
    int ignore_keys;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOO!OO!OO!O!O!OOLLLndpO!OO", kwlist, &sender, &metadata,
                                     &accumulator, &PyDict_Type, &batches, &lock, &PyDict_Type, &hash_cache,
                                     &sticky, &PyDict_Type, &topic_touched, &PyType_Type, &future_type,
                                     &PyType_Type, &batch_type, &monotonic_ms, &wall_ms, &max_request_size,
                                     &record_overhead, &bound_extra, &hash_cache_size, &touch_ms, &ignore_keys,
                                     &PyByteArray_Type, &gate, &callback_codes, &open_batch))
        return -1;
    if (open_batch != Py_None && !PyCallable_Check(open_batch)) {
        PyErr_SetString(PyExc_TypeError, "open_batch must be callable or None");
        return -1;
    }
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
    if (!PyType_IsSubtype(batch_type, &BatchBaseType)) {
        PyErr_SetString(PyExc_TypeError, "batch_type must be a subclass of BatchBase");
        return -1;
    }
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
    topic_cache_reset(self, NULL, NULL, 0);
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
    Py_XSETREF(self->open_batch, Py_NewRef(open_batch));
    self->max_request_size = max_request_size;
    self->record_overhead = record_overhead;
    self->bound_extra = bound_extra;
    self->hash_cache_size = hash_cache_size;
    self->touch_ms = touch_ms;
    self->ignore_keys = ignore_keys;
    self->lock_direct = lock_layout_ok(lock);
    if (self->lock_direct < 0) return -1;
    self->lock_sem = self->lock_direct ? lock_is_sem(lock) : 0;
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
    PyObject *sent, *was = PyList_GET_ITEM(st, 1), *limit = PyList_GET_ITEM(st, 2);
    int full, o1 = 1, o2 = 1;
    long long sent_ll = 0, limit_ll = 0;
    if (PyLong_CheckExact(was) && PyLong_CheckExact(limit)) { /* (always: the sum and test without objects) */
        sent_ll = PyLong_AsLongLongAndOverflow(was, &o1);
        limit_ll = PyLong_AsLongLongAndOverflow(limit, &o2);
        if (sent_ll == -1 && PyErr_Occurred()) return -1;
        if (limit_ll == -1 && PyErr_Occurred()) return -1;
    }
    if (!o1 && !o2 && size >= 0 && sent_ll <= LLONG_MAX - size) {
        sent_ll += size;
        full = sent_ll >= limit_ll;
        sent = PyLong_FromLongLong(sent_ll);
        if (sent == NULL) return -1;
    } else {
        PyObject *size_obj = PyLong_FromLongLong(size);
        if (size_obj == NULL) return -1;
        sent = PyNumber_Add(was, size_obj);
        Py_DECREF(size_obj);
        if (sent == NULL) return -1;
        full = PyObject_RichCompareBool(sent, limit, Py_GE);
    }
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
 *
 * When every check has passed and only the append failed because the partition has no open batch with room
 * (no queue or no batch yet, the last batch closed, or full), the record goes to ``open_batch(producer, topic,
 * partition, timestamp, key, value, callback, now, partition argument, timestamp_ms argument)``
 * (Producer._open_batch: RecordAccumulator.append with max.block.ms, which may wait for memory, and the wakeup
 * for a new batch; an error send() reports through the future comes back as a failed future) instead of the
 * whole Python send(); then the sticky bytes are counted here as for a hit, when the record was queued (its
 * future's batch is a ProducerBatch).
 */
static int fast_send(FastSend *fs, PyObject *producer, PyObject **a, PyObject **out) {
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
    long long n;
    int cached = topic == fs->c_topic && fs->c_counts == fs->last_counts; /* (the topic's cache is for now) */
    if (cached) {
        n = fs->c_n;
    } else {
        PyObject *n_obj = PyDict_GetItemWithError(fs->last_counts, topic); /* borrowed: last_counts holds it */
        n = n_obj == NULL ? -1 : PyLong_AsLongLong(n_obj);
        if (n_obj == NULL) {
            if (PyErr_Occurred()) goto error_cluster;
            goto fallback_cluster;
        }
        if (n == -1 && PyErr_Occurred()) goto error_cluster;
        if (n <= 0) goto fallback_cluster;
        topic_cache_reset(fs, topic, fs->last_counts, n);
        cached = 1;
    }
    /* (the touch check has a 1 s period: the coarse clock, a few ms behind time.monotonic(), is enough) */
#ifdef CLOCK_MONOTONIC_COARSE
    if (clock_now(fs->monotonic_ms, CLOCK_MONOTONIC_COARSE, &now) < 0) goto error_cluster;
#else
    if (clock_now(fs->monotonic_ms, CLOCK_MONOTONIC, &now) < 0) goto error_cluster;
#endif
    double t_touched;
#ifdef HAVE_DICT_VERSION
    /* (the topic is checked again: an injected clock is Python code, which may have sent to another topic) */
    if (topic == fs->c_topic && fs->c_touched_ok && DICT_VERSION(fs->topic_touched) == fs->c_touched_ver) {
        t_touched = fs->c_touched;
    } else
#endif
    {
        PyObject *touched = PyDict_GetItemWithError(fs->topic_touched, topic);
        if (touched == NULL) {
            if (PyErr_Occurred()) goto error_cluster;
            goto fallback_cluster; /* never touched: the Python path touches it */
        }
        t_touched = PyFloat_AsDouble(touched);
        if (t_touched == -1.0 && PyErr_Occurred()) goto error_cluster;
#ifdef HAVE_DICT_VERSION
        /* (a float's value: a lookup reads the same while the dict's tag stays; only a found one is kept,
           so that a topic the Python path is about to touch is looked up again) */
        if (topic == fs->c_topic) {
            fs->c_touched_ok = 1;
            fs->c_touched = t_touched;
            fs->c_touched_ver = DICT_VERSION(fs->topic_touched);
        }
#endif
    }
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
#ifdef HAVE_DICT_VERSION
        if (topic == fs->c_topic && fs->c_sticky_ok && DICT_VERSION(fs->sticky_state) == fs->c_sticky_ver) {
            sticky = fs->c_sticky;
        } else
#endif
        {
            sticky = PyDict_GetItemWithError(fs->sticky_state, topic);
            if (sticky == NULL && PyErr_Occurred()) goto error_cluster;
#ifdef HAVE_DICT_VERSION
            if (topic == fs->c_topic) {
                Py_XINCREF(sticky);
                Py_XSETREF(fs->c_sticky, sticky);
                fs->c_sticky_ver = DICT_VERSION(fs->sticky_state);
                fs->c_sticky_ok = 1;
            }
#endif
        }
        if (sticky == NULL) goto fallback_cluster;
        Py_INCREF(sticky);
        if (!PyList_CheckExact(sticky) || PyList_GET_SIZE(sticky) != 3) goto fallback_cluster;
        part = PyLong_AsLongLong(PyList_GET_ITEM(sticky, 0));
        if (part == -1 && PyErr_Occurred()) goto error_cluster;
        if (part < 0 || part >= n) goto fallback_cluster;
    }
    /* the append, under the accumulator's lock, into the partition's last open batch */
    if (fs_lock(fs) < 0) goto error_cluster;
    int status = 0; /* 1 appended, 0 fallback, -1 error */
    int need_batch = 0; /* (with status 0) the partition has no open batch with room: open_batch() takes it */
    PyObject *fut = NULL, *last = NULL;
    /* again under the lock: the accumulator's close() clears the flag while it holds the lock */
    if (!gate_open(fs)) goto unlock;
    PyObject *dq = NULL;
#ifdef HAVE_DICT_VERSION
    /* (cached is still right: waiting for the lock may have let another thread change the cache) */
    cached = cached && topic == fs->c_topic;
    if (cached && DICT_VERSION(fs->batches) == fs->c_batches_ver && part < fs->c_dq_n) dq = fs->c_dq[part];
    if (dq == NULL)
#endif
    {
        PyObject *tp = topic_partition(fs, topic, part, n);
        if (tp == NULL) {
            status = -1;
            goto unlock;
        }
        dq = PyDict_GetItemWithError(fs->batches, tp);
        Py_DECREF(tp);
        if (dq == NULL) {
            if (PyErr_Occurred()) status = -1;
            else need_batch = 1; /* the partition's first batch */
            goto unlock;
        }
#ifdef HAVE_DICT_VERSION
        if (cached && topic == fs->c_topic) { /* (topic_partition may have run a collection: checked again) */
            if (fs->c_dq == NULL || DICT_VERSION(fs->batches) != fs->c_batches_ver) {
                PyObject **slots = fs->c_dq;
                if (slots == NULL && (slots = PyMem_Calloc((size_t)fs->c_n, sizeof(PyObject *))) != NULL)
                    fs->c_dq_n = (Py_ssize_t)fs->c_n;
                for (Py_ssize_t i = 0; slots != NULL && i < fs->c_dq_n; i++) Py_CLEAR(slots[i]);
                fs->c_dq = slots;
                fs->c_batches_ver = DICT_VERSION(fs->batches);
            }
            if (part < fs->c_dq_n) Py_XSETREF(fs->c_dq[part], Py_NewRef(dq));
        }
#endif
    }
    Py_INCREF(dq);
    Py_ssize_t dq_len = PySequence_Size(dq);
    last = dq_len > 0 ? PySequence_GetItem(dq, dq_len - 1) : NULL;
    Py_DECREF(dq);
    if (dq_len < 0 || (dq_len > 0 && last == NULL)) {
        status = -1;
        goto unlock;
    }
    if (last == NULL) {
        need_batch = 1;
        goto unlock;
    }
    if (Py_TYPE(last) != fs->batch_type) goto unlock; /* (a subclass of BatchBase: checked) */
    if (((BatchBase *)last)->closed != Py_False) {
        need_batch = ((BatchBase *)last)->closed == Py_True;
        goto unlock;
    }
    PyObject *builder = ((BatchBase *)last)->builder;
    PyObject *thunks = ((BatchBase *)last)->thunks;
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
        status = appended; /* 0: the batch is full: open_batch() opens the next one (or grows a compressed one) */
        need_batch = appended == 0;
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
    if (!PyErr_Occurred()) { /* (the common case: no exception to keep around the release) */
        if (fs_unlock(fs) < 0) status = -1;
    } else {
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
    if (status < 0) {
        Py_XDECREF(fut);
        goto error_cluster;
    }
    if (status == 0) {
        if (!need_batch || fs->open_batch == Py_None) goto fallback_cluster;
        /* the rest of send() for this record, in Python: RecordAccumulator.append and the new batch's wakeup.
           ``now`` as send() reads it: time.monotonic() (the coarse clock above is only for the touch check),
           or the injected clock's one reading */
        if (fs->monotonic_ms == Py_None && clock_now(Py_None, CLOCK_MONOTONIC, &now) < 0) goto error_cluster;
        PyObject *part_obj = PyLong_FromLongLong(part);
        PyObject *ts_obj = part_obj == NULL ? NULL : PyLong_FromLongLong(timestamp);
        PyObject *now_obj = ts_obj == NULL ? NULL : PyFloat_FromDouble(now);
        if (now_obj != NULL) {
            PyObject *call_args[10] = {producer, topic, part_obj, ts_obj, key, value, callback, now_obj, partition,
                                       ts_arg};
            fs->opened++;
            fut = PyObject_Vectorcall(fs->open_batch, call_args, 10, NULL);
        }
        Py_XDECREF(part_obj);
        Py_XDECREF(ts_obj);
        Py_XDECREF(now_obj);
        if (fut == NULL) goto error_cluster;
        /* queued (else a failed future: send() counts no sticky bytes for a record it could not queue) */
        if (!PyObject_TypeCheck(fut, &FutureBaseType) || ((FutureBase *)fut)->batch == NULL ||
            Py_TYPE(((FutureBase *)fut)->batch) != fs->batch_type) {
            Py_XDECREF(sticky);
            Py_DECREF(cluster);
            *out = fut;
            return 1;
        }
        status = 2;
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
    if (status == 1) fs->hits++;
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
    {"hits", T_LONGLONG, offsetof(FastSend, hits), READONLY, "records queued by the fast path into an open batch"},
    {"opened", T_LONGLONG, offsetof(FastSend, opened), READONLY,
     "records the fast path handed to open_batch (no open batch with room)"},
    {"lock_direct", T_INT, offsetof(FastSend, lock_direct), READONLY, "the lock is taken without a call"},
    {"lock_sem", T_INT, offsetof(FastSend, lock_sem), READONLY, "... as the semaphore it is (Linux)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FastSendType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.producer._send.FastSend",
    .tp_basicsize = sizeof(FastSend),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What Producer.send()'s compiled fast path reads (the producer's _fast).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastSend_init,
    .tp_dealloc = (destructor)FastSend_dealloc,
    .tp_members = FastSend_members,
};


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
                int r = fast_send((FastSend *)fs, producer, a, &out);
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

SENDMETHOD_TYPE(SendMethodType, "SendMethod", SendMethod_vectorcall, "kproducer.producer._send.SendMethod",
                "A method whose plain calls run the owner's FastSend (Producer.send); others call __func__.")

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
    if (PyModule_AddType(mod, &FastSendType) < 0) return -1;
    if (PyModule_AddType(mod, &SendMethodType) < 0) return -1;
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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kproducer.producer._send.SensorBase",
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
    {"sticky_cut", (PyCFunction)(void (*)(void))sticky_cut, METH_FASTCALL,
     "The sticky partitioner's cut: (stop, bytes) of the records from start until their bytes reach budget."},
    {"produce_request_stats", (PyCFunction)produce_request_stats, METH_O,
     "The metrics' figures of a produce request's batches."},
    {"bytearray_exported", (PyCFunction)bytearray_exported, METH_O,
     "Whether something holds a view of the bytearray."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_send", "Compiled send() fast path and bookkeeping of kproducer (optional).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__send(void) {
    if (kp_records_import() < 0) return NULL;
    if (PyType_Ready(&FutureBaseType) < 0 || PyType_Ready(&BatchBaseType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddType(mod, &FutureBaseType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    if (PyModule_AddType(mod, &BatchBaseType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    if (fastsend_module_init(mod) < 0 || bookkeeping_module_init() < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    if (PyModule_AddType(mod, &SensorBaseType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
