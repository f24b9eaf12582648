/*
 * The layout and descriptor behaviour shared by producer/_send.c's SendMethod (Producer.send) and _aio.c's
 * AioSendMethod (AsyncProducer.send): a method descriptor holding the Python function it stands in for. Each
 * module includes its own (static) copy; only their vectorcall differs.
 */
#ifndef KPRODUCER_SENDMETHOD_H
#define KPRODUCER_SENDMETHOD_H

#include "../protocol/_ccommon.h"

/* SendMethod(func): the descriptor Producer.send */

typedef struct {
    PyObject_HEAD
    PyObject *func;
    PyObject *dict;
    vectorcallfunc vectorcall;
} SendMethod;

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

/* tp_init and tp_new of either type: ``what(func)`` holds ``func``; calls go to ``vectorcall`` */
static int SendMethod_init_with(SendMethod *self, PyObject *args, const char *what, vectorcallfunc vectorcall) {
    PyObject *func;
    if (!PyArg_ParseTuple(args, "O", &func)) return -1;
    if (!PyCallable_Check(func)) {
        PyErr_Format(PyExc_TypeError, "%s(func): func must be callable", what);
        return -1;
    }
    Py_XSETREF(self->func, Py_NewRef(func));
    self->vectorcall = vectorcall;
    return 0;
}

static PyObject *SendMethod_new_with(PyTypeObject *type, vectorcallfunc vectorcall) {
    SendMethod *self = (SendMethod *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = vectorcall;
    return (PyObject *)self;
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

/* SENDMETHOD_TYPE(Type, Name, call_fn, tp_name, doc): the type object ``Type`` of a SendMethod whose calls go
   to ``call_fn`` (declared before), with its tp_init/tp_new (``Name(func)``); everything else is shared above. */
#define SENDMETHOD_TYPE(Type, Name, call_fn, tpname, doc)                                                         \
    static int Type##_init(SendMethod *self, PyObject *args, PyObject *kwds) {                                    \
        (void)kwds;                                                                                               \
        return SendMethod_init_with(self, args, Name, (vectorcallfunc)(call_fn));                                 \
    }                                                                                                             \
    static PyObject *Type##_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {                             \
        (void)args;                                                                                               \
        (void)kwds;                                                                                               \
        return SendMethod_new_with(type, (vectorcallfunc)(call_fn));                                              \
    }                                                                                                             \
    static PyTypeObject Type = {                                                                                  \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = tpname,                                                          \
        .tp_basicsize = sizeof(SendMethod),                                                                       \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR |                      \
                    Py_TPFLAGS_HAVE_VECTORCALL,                                                                   \
        .tp_doc = doc,                                                                                            \
        .tp_new = Type##_new,                                                                                     \
        .tp_init = (initproc)Type##_init,                                                                         \
        .tp_dealloc = (destructor)SendMethod_dealloc,                                                             \
        .tp_traverse = (traverseproc)SendMethod_traverse,                                                         \
        .tp_clear = (inquiry)SendMethod_clear,                                                                    \
        .tp_descr_get = SendMethod_get,                                                                           \
        .tp_call = (ternaryfunc)SendMethod_call_func,                                                             \
        .tp_vectorcall_offset = offsetof(SendMethod, vectorcall),                                                 \
        .tp_dictoffset = offsetof(SendMethod, dict),                                                              \
        .tp_members = SendMethod_members,                                                                         \
        .tp_getset = SendMethod_getset,                                                                           \
    };

#endif /* KPRODUCER_SENDMETHOD_H */
