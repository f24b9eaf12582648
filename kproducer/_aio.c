/*
 * Optional compiled accelerator of kproducer's asyncio face (kproducer/aio.py): the record futures' await and
 * AsyncProducer.send()'s hot path.
 *
 * Everything here has a pure-Python twin in aio.py that behaves the same; aio.py picks this module when it
 * imported and KPRODUCER_PURE_PYTHON is not set (kproducer/protocol/accel.py). Types:
 *   AioFuture                 base class of aio.RecordFuture (its slots _run and _i, a compiled __await__)
 *   AioHot                    send()'s hot-path counters (twin: aio._PyHotState)
 *   AioReady                  what a staged send() returns: a finished coroutine
 *   AioSendMethod(func)       the class attribute AsyncProducer.send (twin: the Python async def send alone)
 * Functions: aio_setup, aio_stage, aio_nogc, aio_yield_after.
 */
#include "protocol/_ccommon.h"
#include "producer/_sendmethod.h"

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
    .tp_name = "kproducer._aio.AioDone",
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
    .tp_name = "kproducer._aio.AioFuture",
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
    .tp_name = "kproducer._aio.AioHot",
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
    if (PyModule_AddType(mod, &AioHotType) < 0) return -1;
    if (PyModule_AddType(mod, &AioFutureType) < 0) return -1;
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
    .tp_name = "kproducer._aio.AioReady",
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

SENDMETHOD_TYPE(AioSendMethodType, "AioSendMethod", AioSendMethod_vectorcall, "kproducer._aio.AioSendMethod",
                "AsyncProducer.send: a call that stages its record at once returns a finished coroutine (AioReady); "
                "others call __func__.")

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
    if (PyModule_AddType(mod, &AioReadyType) < 0) return -1;
    if (PyModule_AddType(mod, &AioSendMethodType) < 0) return -1;
    return 0;
}


static PyMethodDef methods[] = {
    {"aio_nogc", aio_nogc, METH_O, "Make RecordFuture's instances non-GC objects (once, at import)."},
    {"aio_yield_after", aio_yield_after, METH_O, "How long awaiting done records may run before one yields."},
    {"aio_setup", (PyCFunction)(void (*)(void))aio_setup, METH_FASTCALL,
     "Give the asyncio record future's compiled await aio.py's types (once, at import)."},
    {"aio_stage", (PyCFunction)(void (*)(void))aio_stage, METH_FASTCALL,
     "AsyncProducer.send()'s hot path: stage one more keyless record; None when it does not apply."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_aio", "Compiled hot paths of kproducer's asyncio producer (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__aio(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (aio_module_init(mod) < 0 || aiosend_module_init(mod) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
