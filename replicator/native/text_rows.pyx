# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A text-protocol result set's row packets framed and split into columns, in C.

``TextRows`` takes the bytes a server sends after a result set's column definitions, as they
come off the socket (``feed``, any chunking): packet headers (3-byte length, sequence id,
checked), payloads of 16 MiB continued by the next packet, the row packets kept back to back,
until the EOF packet (or an error packet). ``split`` then cuts every row into its
length-coded values (0xFB: NULL) and ``column`` hands out one column's values as Arrow
buffers (validity, int64 offsets, bytes); ``payload`` gives a row's packet for the row path.

The rules are those of ``sources/mysql/rawchunk.py``'s numpy split, which it replaces: a row
with fewer values than columns, a value running past its row, bytes left after the last
value, or a first byte 0xFF refuse the split (the caller decodes the rows the row way).
Pure: bytes in, buffers out, no I/O; the GIL is released while a fed chunk is framed and
while the rows are split.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memmove, memset

# ``feed``'s answers.
cdef enum:
    S_MORE = 0          # every byte taken; the result goes on
    S_DONE = 1          # the EOF packet was read (``last``)
    S_ERROR = 2         # an error packet was read (``last``)
    S_BAD_SEQUENCE = 3  # a packet's sequence id is not the next one (``seq``: the one it had)
    S_TRAILING = 4      # bytes came after the EOF packet
    MAX_PACKET = 0xFFFFFF

MORE, DONE, ERROR, BAD_SEQUENCE, TRAILING = S_MORE, S_DONE, S_ERROR, S_BAD_SEQUENCE, S_TRAILING


cdef struct Buf:
    char* data
    Py_ssize_t len
    Py_ssize_t cap


cdef int buf_reserve(Buf* b, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t want = b.len + extra
    cdef Py_ssize_t cap
    cdef char* p
    if want <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < want:
        cap *= 2
    p = <char*> realloc(b.data, cap)
    if p == NULL:
        return -1
    b.data = p
    b.cap = cap
    return 0


cdef inline int buf_put(Buf* b, const void* src, Py_ssize_t n) noexcept nogil:
    if buf_reserve(b, n) < 0:
        return -1
    memcpy(b.data + b.len, src, n)
    b.len += n
    return 0


cdef class TextRows:
    """The row packets of one text-protocol result set (see the module doc)."""

    cdef Buf pending     # bytes of a packet not complete yet
    cdef Buf data        # row payloads back to back
    cdef Buf bounds      # int64 start of each row in ``data``, then the end
    cdef Buf cont        # a payload being continued (16 MiB packets)
    cdef int continuing
    cdef int next_seq
    cdef int state       # MORE, DONE, ERROR, BAD_SEQUENCE, TRAILING
    cdef int bad_seq_id
    cdef bytes _last     # the EOF or error payload
    cdef int ncols
    cdef int64_t* vstart  # per row and column: value start in ``data`` (-1: NULL)
    cdef int64_t* vlen
    cdef Py_ssize_t _last_len  # the EOF or error payload's length, and where it ends
    cdef Py_ssize_t _last_end

    def __cinit__(self, int seq):
        cdef int64_t zero = 0
        memset(&self.pending, 0, sizeof(Buf))
        memset(&self.data, 0, sizeof(Buf))
        memset(&self.bounds, 0, sizeof(Buf))
        memset(&self.cont, 0, sizeof(Buf))
        self.next_seq = seq & 0xFF
        self.state = S_MORE
        self.continuing = 0
        self._last = b""
        self.ncols = 0
        self.vstart = NULL
        self.vlen = NULL
        if buf_put(&self.bounds, &zero, 8) < 0:
            raise MemoryError()

    def __dealloc__(self):
        free(self.pending.data)
        free(self.data.data)
        free(self.bounds.data)
        free(self.cont.data)
        free(self.vstart)
        free(self.vlen)

    @property
    def rows(self) -> int:
        return <int> (self.bounds.len // 8 - 1)

    @property
    def size(self) -> int:
        """Bytes of the rows' payloads."""
        return self.data.len

    @property
    def seq(self) -> int:
        """The next packet's sequence id."""
        return self.next_seq

    @property
    def bad_seq(self) -> int:
        """After BAD_SEQUENCE: the sequence id the packet had."""
        return self.bad_seq_id

    @property
    def last(self) -> bytes:
        """The EOF or error packet's payload."""
        return self._last

    def feed(self, const uint8_t[::1] chunk) -> int:
        """Takes the next bytes of the result; returns MORE, DONE, ERROR, BAD_SEQUENCE or
        TRAILING (the last three and DONE: nothing more may be fed)."""
        cdef Py_ssize_t n = chunk.shape[0]
        cdef int r
        cdef Py_ssize_t at = -1
        if self.state != S_MORE:
            return S_TRAILING if n else self.state
        if n == 0:
            return S_MORE
        if buf_put(&self.pending, &chunk[0], n) < 0:
            raise MemoryError()
        with nogil:
            r = self._frame(&at)
        if r == -1:
            raise MemoryError()
        if at >= 0:  # the EOF or error payload
            self._last = PyBytes_FromStringAndSize(self.pending.data + at, self._last_len)
            self._consume_last()
        return self.state

    cdef void _consume_last(self) noexcept:
        cdef Py_ssize_t rest = self.pending.len - self._last_end
        if rest > 0:
            self.state = S_TRAILING
        self.pending.len = 0

    cdef int _frame(self, Py_ssize_t* last_at) noexcept nogil:
        """Frames the complete packets of ``pending``; keeps an incomplete one."""
        cdef const uint8_t* p = <const uint8_t*> self.pending.data
        cdef Py_ssize_t end = self.pending.len, off = 0, n
        cdef int64_t bound
        cdef int seq
        while end - off >= 4:
            n = p[off] | (p[off + 1] << 8) | (p[off + 2] << 16)
            if end - off - 4 < n:
                break
            seq = p[off + 3]
            if seq != self.next_seq:
                self.state = S_BAD_SEQUENCE
                self.bad_seq_id = seq
                self.pending.len = 0
                return 0
            self.next_seq = (self.next_seq + 1) & 0xFF
            off += 4
            if n == MAX_PACKET or self.continuing:
                # a payload of 16 MiB goes on in the next packet (pymysql joins them)
                if buf_put(&self.cont, p + off, n) < 0:
                    return -1
                off += n
                if n == MAX_PACKET:
                    self.continuing = 1
                    continue
                self.continuing = 0
                if self.cont.len and <uint8_t> self.cont.data[0] == 0xFF:
                    return self._stop_at_cont(last_at, S_ERROR, off)
                if buf_put(&self.data, self.cont.data, self.cont.len) < 0:
                    return -1
                self.cont.len = 0
            elif n < 9 and n and p[off] == 0xFE:  # EOF
                self.state = S_DONE
                last_at[0] = off
                self._last_len = n
                self._last_end = off + n
                return 0
            elif n and p[off] == 0xFF:  # an error packet
                self.state = S_ERROR
                last_at[0] = off
                self._last_len = n
                self._last_end = off + n
                return 0
            else:
                if buf_put(&self.data, p + off, n) < 0:
                    return -1
                off += n
            bound = self.data.len
            if buf_put(&self.bounds, &bound, 8) < 0:
                return -1
        if off:
            memmove(self.pending.data, self.pending.data + off, end - off)
            self.pending.len = end - off
        return 0

    cdef int _stop_at_cont(self, Py_ssize_t* last_at, int state, Py_ssize_t off) noexcept nogil:
        """An error in a continued payload: it is moved to ``pending`` to be handed out."""
        cdef Py_ssize_t n = self.cont.len
        self.state = state
        self.pending.len = 0
        if buf_put(&self.pending, self.cont.data, n) < 0:
            return -1
        self.cont.len = 0
        last_at[0] = 0
        self._last_len = n
        self._last_end = n
        return 0

    def payload(self, Py_ssize_t i) -> bytes:
        """Row ``i``'s packet payload."""
        cdef const int64_t* b = <const int64_t*> self.bounds.data
        if not 0 <= i < self.rows:
            raise IndexError(i)
        return PyBytes_FromStringAndSize(self.data.data + b[i], b[i + 1] - b[i])

    def split(self, int ncols) -> bool:
        """Cuts every row into ``ncols`` length-coded values; False: a row does not (too
        few values, a value past its row, bytes after the last one, a first byte 0xFF)."""
        cdef Py_ssize_t rows = self.rows
        cdef int ok
        if ncols <= 0:
            return False
        free(self.vstart)
        free(self.vlen)
        self.ncols = 0
        self.vstart = <int64_t*> malloc(max(rows * ncols, 1) * sizeof(int64_t))
        self.vlen = <int64_t*> malloc(max(rows * ncols, 1) * sizeof(int64_t))
        if self.vstart == NULL or self.vlen == NULL:
            raise MemoryError()
        with nogil:
            ok = self._split(ncols)
        if ok:
            self.ncols = ncols
        return bool(ok)

    cdef int _split(self, int ncols) noexcept nogil:
        cdef const uint8_t* p = <const uint8_t*> self.data.data
        cdef const int64_t* b = <const int64_t*> self.bounds.data
        cdef Py_ssize_t rows = self.bounds.len // 8 - 1, r
        cdef int64_t off, end, size
        cdef int c, first, width, k
        for r in range(rows):
            off = b[r]
            end = b[r + 1]
            for c in range(ncols):
                if off >= end:
                    return 0  # fewer values than columns
                first = p[off]
                if first == 251:
                    self.vstart[r * ncols + c] = -1
                    self.vlen[r * ncols + c] = 0
                    off += 1
                    continue
                if first == 255:
                    return 0
                if first < 251:
                    size = first
                    width = 0
                else:
                    width = 2 if first == 252 else 3 if first == 253 else 8
                    if end - off - 1 < width:
                        return 0
                    size = 0
                    for k in range(width - 1, -1, -1):
                        size = (size << 8) | p[off + 1 + k]
                    if size < 0:
                        return 0
                off += 1 + width
                if size > end - off:
                    return 0  # runs past its row
                self.vstart[r * ncols + c] = off
                self.vlen[r * ncols + c] = size
                off += size
            if off != end:
                return 0  # bytes after the last value
        return 1

    def column(self, int c) -> tuple:
        """Column ``c`` of the split rows: (validity bytes or None, null count, int64
        offsets bytes, data bytes)."""
        cdef Py_ssize_t rows = self.rows, r, nulls = 0, total = 0
        cdef int ncols = self.ncols
        cdef bytes offsets, values, valid
        cdef int64_t* o
        cdef char* d
        cdef uint8_t* v
        cdef int64_t s
        if ncols == 0 or not 0 <= c < ncols:
            raise IndexError("split() first, and a column in range")
        for r in range(rows):
            if self.vstart[r * ncols + c] < 0:
                nulls += 1
            else:
                total += self.vlen[r * ncols + c]
        offsets = PyBytes_FromStringAndSize(NULL, (rows + 1) * 8)
        values = PyBytes_FromStringAndSize(NULL, total)
        valid = PyBytes_FromStringAndSize(NULL, (rows + 7) // 8)
        o = <int64_t*> <char*> offsets
        d = <char*> values
        v = <uint8_t*> <char*> valid
        with nogil:
            memset(v, 0, (rows + 7) // 8)
            o[0] = 0
            total = 0
            for r in range(rows):
                s = self.vstart[r * ncols + c]
                if s >= 0:
                    memcpy(d + total, self.data.data + s, self.vlen[r * ncols + c])
                    total += self.vlen[r * ncols + c]
                    v[r >> 3] |= 1 << (r & 7)
                o[r + 1] = total
        return (valid if nulls else None, nulls, offsets, values)
