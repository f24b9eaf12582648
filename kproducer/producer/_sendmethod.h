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
