/*
 * What kproducer's compiled modules share (protocol/_records.c, network/_netio.c, producer/_send.c, _aio.c):
 * the includes, CPython compatibility, and small helpers. Static: each module gets its own copy.
 */
#ifndef KPRODUCER_CCOMMON_H
#define KPRODUCER_CCOMMON_H

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

/* the offset of a __slots__ attribute of a Python class (read through its member descriptor) */
static inline int slot_offset(PyTypeObject *tp, const char *name, Py_ssize_t *off) {
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

#endif /* KPRODUCER_CCOMMON_H */
