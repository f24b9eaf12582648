/*
 * Optional compiled accelerator of kproducer's network layer (Linux): the network thread's socket I/O,
 * giving the GIL up only to wait. Functions (twins: the selectors module and the socket methods, which
 * kproducer/network/selector.py uses elsewhere, with this module absent, or with KPRODUCER_PURE_PYTHON set):
 *   epoll_wait_io, sendmsg_nogil, recv_into_nogil, timerfd_open, timerfd_arm (twins: timer.py's ctypes calls)
 * On other systems the module is empty.
 */
#include "../protocol/_ccommon.h"

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
#include <math.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>
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

/* timerfd_open() -> fd: a non-blocking, close-on-exec timerfd on CLOCK_MONOTONIC (network/timer.py). */
static PyObject *timerfd_open(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(fd);
}

/* timerfd_arm(fd, deadline_ms): make the timerfd readable once at deadline_ms (CLOCK_MONOTONIC, i.e.
   time.monotonic() in ms), rounded up to the nanosecond and never 0 (which would disarm it). The application's
   thread calls it for every new batch: one system call, no ctypes (whose call costs several times more). */
static PyObject *timerfd_arm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "timerfd_arm(fd, deadline_ms)");
        return NULL;
    }
    int fd;
    if (as_fd(args[0], &fd) < 0) return NULL;
    double ms = PyFloat_AsDouble(args[1]);
    if (ms == -1.0 && PyErr_Occurred()) return NULL;
    if (!(ms >= 0.0) || ms > 9.0e15) {  /* (also NaN) */
        PyErr_SetString(PyExc_ValueError, "timerfd_arm: the deadline must be a finite time in ms, >= 0");
        return NULL;
    }
    double ns = ceil(ms * 1e6);
    if (ns < 1.0) ns = 1.0;
    long long total = (long long)ns;
    struct itimerspec spec;
    memset(&spec, 0, sizeof spec);
    spec.it_value.tv_sec = (time_t)(total / 1000000000LL);
    spec.it_value.tv_nsec = (long)(total % 1000000000LL);
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, NULL) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}
#endif

static PyMethodDef methods[] = {
#ifdef HAVE_NET_IO
    {"epoll_wait_io", (PyCFunction)(void (*)(void))epoll_wait_io, METH_FASTCALL,
     "epoll_wait(epfd, timeout_ms, maxevents) -> [(fd, selectors mask)]; the GIL is given up only to wait."},
    {"sendmsg_nogil", (PyCFunction)(void (*)(void))sendmsg_nogil, METH_FASTCALL,
     "One sendmsg() of a list of buffers on a non-blocking socket, holding the GIL; bytes written."},
    {"recv_into_nogil", (PyCFunction)(void (*)(void))recv_into_nogil, METH_FASTCALL,
     "One recv() into a writable buffer on a non-blocking socket, holding the GIL; bytes read."},
    {"timerfd_open", timerfd_open, METH_NOARGS, "A non-blocking timerfd on CLOCK_MONOTONIC; its fd."},
    {"timerfd_arm", (PyCFunction)(void (*)(void))timerfd_arm, METH_FASTCALL,
     "timerfd_arm(fd, deadline_ms): the timerfd becomes readable once at deadline_ms (CLOCK_MONOTONIC ms)."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_netio", "Compiled socket I/O of kproducer's network thread (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__netio(void) { return PyModule_Create(&module); }
