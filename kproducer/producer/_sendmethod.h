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

#endif /* KPRODUCER_SENDMETHOD_H */
