# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Binlog row images (the MySQL row format) decoded into Arrow column buffers, in C.

``RowsBuilder`` holds one table version's column plans and appends the rows of WRITE,
UPDATE and DELETE rows events (their bodies after the columns-present bitmaps, every
column present) to growing column buffers: for each column a validity bitmap and either
fixed-width values (bool bits, int32, int64, float64, decimal128) or int64 offsets and
bytes (text, binary). An update keeps its after image; its before image's key goes to the
old-key columns only when the key's bytes changed; a delete's row is null and its key goes
to the old-key columns. ``finish`` hands the buffers out as bytes and starts over.

An event is taken whole or not at all: anything the Python decoder (``rowimage.py``) treats
specially, or any value that would not come out as that decoder's value, refuses the event
(``append`` returns -1 and the buffers are as before it): a zero or invalid date, datetime or
timestamp, an enum index past its labels, text that is not valid in its charset, a
negative-zero decimal or one with a digit group out of range, a NULL key, a value running
past the body, bytes left over. The caller then decodes that event the existing way.

Pure: bytes in, buffers out, no I/O. The GIL is released while a large body is decoded
(``NOGIL_MIN_BYTES``); a small one is decoded holding it, because handing the GIL over for a
few microseconds of work would make this thread wait for the other threads' next switch.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove, memset

cdef extern from *:
    """
    typedef unsigned __int128 rp_u128;
    static const uint32_t RP_POW10_9[10] = {1, 10, 100, 1000, 10000, 100000, 1000000,
                                              10000000, 100000000, 1000000000};
    /* acc * 10**digits + seg, in 128 bits (well-formed digit groups of at most 38 digits
       never overflow). */
    /* *acc = *acc * 10**digits + seg; 1 when that does not fit 128 bits. */
    static inline int rp_shift_add_checked(rp_u128* acc, int digits, uint32_t seg) {
        rp_u128 v;
        if (__builtin_mul_overflow(*acc, (rp_u128)RP_POW10_9[digits], &v)) return 1;
        return __builtin_add_overflow(v, (rp_u128)seg, acc);
    }
    /* v < 10**precision (what a decimal128 of that precision holds). */
    static inline int rp_fits(rp_u128 v, int precision) {
        rp_u128 limit = 1;
        for (int i = 0; i < precision; i++) limit *= 10;
        return v < limit;
    }
    /* The two's-complement little-endian 16 bytes of +/- v. */
    static inline void rp_put_i128(uint8_t* out, rp_u128 v, int neg) {
        if (neg) v = ~v + 1;
        for (int i = 0; i < 16; i++) { out[i] = (uint8_t)(v & 0xff); v >>= 8; }
    }
    static inline rp_u128 rp_u128_from_u64(uint64_t v) { return (rp_u128)v; }
    static inline int rp_u128_is_zero(rp_u128 v) { return v == 0; }
    """
    ctypedef struct rp_u128:
        pass
    int rp_shift_add_checked(rp_u128* acc, int digits, uint32_t seg) nogil
    int rp_fits(rp_u128 v, int precision) nogil
    void rp_put_i128(uint8_t* out, rp_u128 v, int neg) nogil
    rp_u128 rp_u128_from_u64(uint64_t v) nogil
    int rp_u128_is_zero(rp_u128 v) nogil

# Column kinds (how the row format stores a value) and output layouts; the numbers are the
# plan tuple's first two fields (``rowarrow.py`` builds the plans).
cdef enum:
    K_INT = 1
    K_BOOL = 2
    K_FLOAT = 3
    K_DOUBLE = 4
    K_DECIMAL = 5
    K_STRING = 6
    K_DATE = 7
    K_DATETIME = 8
    K_TIMESTAMP = 9
    K_TIME = 10
    K_YEAR = 11
    K_ENUM = 12
    K_SET = 13
    K_BIT = 14

cdef enum:
    O_BOOL = 1
    O_I32 = 2
    O_I64 = 3
    O_F64 = 4
    O_D128 = 5
    O_VAR = 6

cdef enum:
    CS_BINARY = 0
    CS_UTF8 = 1
    CS_TABLE = 2  # a single-byte charset: 256 entries of (length, up to 3 UTF-8 bytes)

# The plan's names for the kinds, layouts and charsets above.
KINDS = {"int": K_INT, "bool": K_BOOL, "float": K_FLOAT, "double": K_DOUBLE,
         "decimal": K_DECIMAL, "string": K_STRING, "date": K_DATE, "datetime": K_DATETIME,
         "timestamp": K_TIMESTAMP, "time": K_TIME, "year": K_YEAR, "enum": K_ENUM,
         "set": K_SET, "bit": K_BIT}
OUTS = {"bool": O_BOOL, "i32": O_I32, "i64": O_I64, "f64": O_F64, "d128": O_D128,
        "var": O_VAR}
CHARSETS = {"binary": CS_BINARY, "utf8": CS_UTF8, "table": CS_TABLE}

NOGIL_MIN_BYTES = 65536
cdef Py_ssize_t _NOGIL_MIN = NOGIL_MIN_BYTES

cdef int _DIG2BYTES[10]
_DIG2BYTES[:] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
cdef int _FSP_BYTES[7]
_FSP_BYTES[:] = [0, 1, 1, 2, 2, 3, 3]
cdef int64_t _TIME2_SCALE[4]
_TIME2_SCALE[:] = [0, 10000, 100, 1]
cdef int64_t _POW10[7]
_POW10[:] = [1, 10, 100, 1000, 10000, 100000, 1000000]


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
    cap = b.cap * 2 if b.cap else 256
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


cdef struct Col:
    int kind
    int out
    int width       # bytes of a fixed value; a string's length prefix
    int sign        # K_INT: signed
    int p1          # decimal precision, fsp, bit count
    int p2          # decimal scale
    int pad         # binary(n): right-pad to n bytes with 0x00
    int cs          # K_STRING: CS_*
    int json        # K_STRING: compact JSON text
    const uint8_t* table
    int nlabels
    const char** lab
    Py_ssize_t* lablen
    int dwidth      # decimal: stored bytes
    int nseg        # decimal: digit groups, most significant first
    int nint        # decimal: how many of them are the integer part
    int seg_bytes[24]
    int seg_digits[24]


cdef struct Out:
    Buf valid
    Buf values      # fixed-width values, or int64 offsets
    Buf data        # O_VAR: the bytes
    Py_ssize_t nulls
    Py_ssize_t vlen  # rollback marks
    Py_ssize_t dlen
    Py_ssize_t nmark


cdef struct Span:
    Py_ssize_t start
    Py_ssize_t len
    int null


cdef inline int out_bit(Out* o, Py_ssize_t row, int valid) noexcept nogil:
    cdef Py_ssize_t byte = row >> 3
    if byte >= o.valid.len:
        if buf_reserve(&o.valid, byte + 1 - o.valid.len) < 0:
            return -1
        memset(o.valid.data + o.valid.len, 0, byte + 1 - o.valid.len)
        o.valid.len = byte + 1
    if valid:
        o.valid.data[byte] = <char> ((<uint8_t> o.valid.data[byte]) | (1 << (row & 7)))
    else:
        o.valid.data[byte] = <char> ((<uint8_t> o.valid.data[byte]) & ~(1 << (row & 7)))
    return 0


cdef inline int out_null(Col* c, Out* o, Py_ssize_t row) noexcept nogil:
    """A null at ``row``: a cleared validity bit and a zero value (or an empty string)."""
    cdef int64_t off
    cdef uint8_t zero[16]
    if out_bit(o, row, 0) < 0:
        return -1
    o.nulls += 1
    if c.out == O_VAR:
        off = o.data.len
        return buf_put(&o.values, &off, 8)
    if c.out == O_BOOL:
        return out_bit_value(o, row, 0)
    memset(zero, 0, 16)
    return buf_put(&o.values, zero, out_width(c.out))


cdef inline int out_width(int out) noexcept nogil:
    if out == O_I32:
        return 4
    if out == O_D128:
        return 16
    return 8


cdef inline int out_bit_value(Out* o, Py_ssize_t row, int v) noexcept nogil:
    """A boolean value: bits in ``values`` (row ``row``)."""
    cdef Py_ssize_t byte = row >> 3
    if byte >= o.values.len:
        if buf_reserve(&o.values, byte + 1 - o.values.len) < 0:
            return -1
        memset(o.values.data + o.values.len, 0, byte + 1 - o.values.len)
        o.values.len = byte + 1
    if v:
        o.values.data[byte] = <char> ((<uint8_t> o.values.data[byte]) | (1 << (row & 7)))
    else:
        o.values.data[byte] = <char> ((<uint8_t> o.values.data[byte]) & ~(1 << (row & 7)))
    return 0


cdef struct Decoder:
    int ncols
    Col* cols
    Out* after
    int nkeys
    int* keys       # column index of each key column
    int* is_key     # per column: its index among the keys, or -1
    Out* old        # per key column
    Buf ops
    Py_ssize_t rows
    Py_ssize_t olds  # rows with an old key
    int kinds
    Span* before_spans
    Span* after_spans


include "binlog_values.pxi"


cdef Py_ssize_t read_image(Decoder* dc, const uint8_t* p, Py_ssize_t end, Py_ssize_t off, Out* outs, Span* spans) noexcept nogil:
    """One row image at ``off`` (NULL bitmap, then the values): into ``outs`` at row
    ``dc.rows`` (NULL: checked only), the key columns' byte spans into ``spans``. Returns the
    offset after it, or -1: refused."""
    cdef int n = dc.ncols
    cdef int nb = (n + 7) >> 3
    cdef const uint8_t* bitmap
    cdef int i, k
    cdef Py_ssize_t got
    cdef Col* c
    if end - off < nb:
        return -1
    bitmap = p + off
    off += nb
    for i in range(n):
        c = &dc.cols[i]
        k = dc.is_key[i]
        if (bitmap[i >> 3] >> (i & 7)) & 1:
            if k >= 0:
                return -1  # a NULL key: the exact path decides
            if outs != NULL and out_null(c, &outs[i], dc.rows) < 0:
                return -1
            continue
        got = dec_value(c, p + off, end - off, &outs[i] if outs != NULL else NULL, dc.rows)
        if got < 0:
            return -1
        if outs != NULL and out_bit(&outs[i], dc.rows, 1) < 0:
            return -1
        if k >= 0:
            spans[k].start = off
            spans[k].len = got
        off += got
    return off


cdef int old_keys(Decoder* dc, const uint8_t* p, Span* spans, int has) noexcept nogil:
    """Row ``dc.rows``'s old key from ``spans`` of ``p`` (``has`` 0: null)."""
    cdef int k
    cdef Col* c
    cdef Out* o
    for k in range(dc.nkeys):
        c = &dc.cols[dc.keys[k]]
        o = &dc.old[k]
        if not has:
            if out_null(c, o, dc.rows) < 0:
                return -1
            continue
        if dec_value(c, p + spans[k].start, spans[k].len, o, dc.rows) < 0:
            return -1
        if out_bit(o, dc.rows, 1) < 0:
            return -1
    return 0


cdef Py_ssize_t decode_rows(Decoder* dc, const uint8_t* p, Py_ssize_t end, int kind) noexcept nogil:
    """The rows of one event body (``kind`` 0 write, 1 update, 2 delete) appended; returns
    how many, or -1 (the caller rolls back)."""
    cdef Py_ssize_t off = 0, next_off, start = dc.rows
    cdef int k, i, moved
    cdef char op
    while off < end:
        if kind == 1:
            next_off = read_image(dc, p, end, off, NULL, dc.before_spans)
            if next_off < 0:
                return -1
            off = next_off
            next_off = read_image(dc, p, end, off, dc.after, dc.after_spans)
            if next_off < 0:
                return -1
            moved = 0
            for k in range(dc.nkeys):
                if dc.before_spans[k].len != dc.after_spans[k].len or memcmp(
                    p + dc.before_spans[k].start, p + dc.after_spans[k].start, dc.after_spans[k].len
                ) != 0:
                    moved = 1
                    break
            off = next_off
            if old_keys(dc, p, dc.before_spans, moved) < 0:
                return -1
            dc.kinds |= 4 if moved else 2
            dc.olds += moved
            op = 117  # 'u'
        elif kind == 0:
            next_off = read_image(dc, p, end, off, dc.after, dc.after_spans)
            if next_off < 0:
                return -1
            off = next_off
            if old_keys(dc, p, NULL, 0) < 0:
                return -1
            dc.kinds |= 1
            op = 99  # 'c'
        else:
            next_off = read_image(dc, p, end, off, NULL, dc.before_spans)
            if next_off < 0:
                return -1
            off = next_off
            for i in range(dc.ncols):
                if out_null(&dc.cols[i], &dc.after[i], dc.rows) < 0:
                    return -1
            if old_keys(dc, p, dc.before_spans, 1) < 0:
                return -1
            dc.kinds |= 8
            dc.olds += 1
            op = 100  # 'd'
        if buf_put(&dc.ops, &op, 1) < 0:
            return -1
        dc.rows += 1
    if off != end:
        return -1
    return dc.rows - start


cdef void out_mark(Out* o) noexcept nogil:
    o.vlen = o.values.len
    o.dlen = o.data.len
    o.nmark = o.nulls


cdef void out_rollback(Out* o, int out) noexcept nogil:
    o.values.len = o.vlen
    o.data.len = o.dlen
    o.nulls = o.nmark


cdef void out_reset(Out* o, int out) noexcept nogil:
    cdef int64_t zero = 0
    o.valid.len = 0
    o.values.len = 0
    o.data.len = 0
    o.nulls = 0
    if out == O_VAR:
        buf_put(&o.values, &zero, 8)


cdef void out_free(Out* o) noexcept nogil:
    free(o.valid.data)
    free(o.values.data)
    free(o.data.data)


cdef object out_buffers(Out* o, int out, Py_ssize_t rows):
    """(validity bytes or None, null count, values bytes, data bytes or None)."""
    cdef Py_ssize_t nbytes = (rows + 7) >> 3
    valid = None
    if o.nulls:
        valid = PyBytes_FromStringAndSize(o.valid.data, nbytes)
    if out == O_BOOL:
        values = PyBytes_FromStringAndSize(o.values.data, nbytes) if rows else b""
    else:
        values = PyBytes_FromStringAndSize(o.values.data, o.values.len)
    data = PyBytes_FromStringAndSize(o.data.data, o.data.len) if out == O_VAR else None
    return (valid, o.nulls, values, data)


cdef class RowsBuilder:
    """One table version's rows events appended column-wise (see the module doc)."""

    cdef Decoder dc
    cdef object _keep  # the label and charset-table bytes the columns point into

    def __cinit__(self, list plans, tuple keys):
        cdef int i, k, n = len(plans)
        cdef Col* c
        memset(&self.dc, 0, sizeof(Decoder))
        self._keep = []
        self.dc.ncols = n
        self.dc.cols = <Col*> malloc(max(n, 1) * sizeof(Col))
        self.dc.after = <Out*> malloc(max(n, 1) * sizeof(Out))
        self.dc.is_key = <int*> malloc(max(n, 1) * sizeof(int))
        self.dc.nkeys = len(keys)
        self.dc.keys = <int*> malloc(max(len(keys), 1) * sizeof(int))
        self.dc.old = <Out*> malloc(max(len(keys), 1) * sizeof(Out))
        self.dc.before_spans = <Span*> malloc(max(len(keys), 1) * sizeof(Span))
        self.dc.after_spans = <Span*> malloc(max(len(keys), 1) * sizeof(Span))
        if (self.dc.cols == NULL or self.dc.after == NULL or self.dc.is_key == NULL or self.dc.keys == NULL
                or self.dc.old == NULL or self.dc.before_spans == NULL or self.dc.after_spans == NULL):
            raise MemoryError()
        memset(self.dc.cols, 0, max(n, 1) * sizeof(Col))
        memset(self.dc.after, 0, max(n, 1) * sizeof(Out))
        memset(self.dc.old, 0, max(len(keys), 1) * sizeof(Out))
        memset(self.dc.before_spans, 0, max(len(keys), 1) * sizeof(Span))
        memset(self.dc.after_spans, 0, max(len(keys), 1) * sizeof(Span))
        for i in range(n):
            self.dc.is_key[i] = -1
            self._plan(&self.dc.cols[i], plans[i])
        for k in range(len(keys)):
            i = keys[k]
            if not 0 <= i < n:
                raise ValueError(f"key column {i} out of range")
            self.dc.keys[k] = i
            self.dc.is_key[i] = k
        self._reset()

    cdef _plan(self, Col* c, dict plan):
        cdef int k, digits, nbytes, integral, scale
        cdef bytes label
        c.kind = KINDS[plan["kind"]]
        c.out = OUTS[plan["out"]]
        c.width = plan.get("width", 0)
        c.sign = plan.get("signed", 0)
        c.p1 = plan.get("p1", 0)
        c.p2 = plan.get("p2", 0)
        c.pad = plan.get("pad", 0)
        c.cs = CHARSETS[plan.get("charset", "binary")]
        c.json = plan.get("json", 0)
        if c.kind in (K_DATETIME, K_TIMESTAMP, K_TIME) and not 0 <= c.p1 <= 6:
            raise ValueError(f"bad fsp in {plan!r}")
        if c.kind in (K_INT, K_BOOL, K_ENUM, K_SET, K_BIT, K_STRING) and not 1 <= c.width <= 8:
            raise ValueError(f"bad width in {plan!r}")
        if c.kind == K_BIT and not 1 <= c.p1 <= 64:
            raise ValueError(f"bad bit count in {plan!r}")
        if c.cs == CS_TABLE:
            table = plan["table"]
            if not isinstance(table, bytes) or len(table) != 1024:
                raise ValueError("a charset table is 256 entries of 4 bytes")
            self._keep.append(table)
            c.table = <const uint8_t*> PyBytes_AS_STRING(table)
        labels = plan.get("labels", ())
        c.nlabels = len(labels)
        if c.nlabels:
            c.lab = <const char**> malloc(c.nlabels * sizeof(char*))
            c.lablen = <Py_ssize_t*> malloc(c.nlabels * sizeof(Py_ssize_t))
            if c.lab == NULL or c.lablen == NULL:
                raise MemoryError()
            for k in range(c.nlabels):
                label = labels[k]
                self._keep.append(label)
                c.lab[k] = PyBytes_AS_STRING(label)
                c.lablen[k] = PyBytes_GET_SIZE(label)
        if c.kind == K_DECIMAL:
            scale = c.p2
            integral = c.p1 - scale
            if integral < 0 or scale < 0 or c.p1 > 65 or scale > 38:
                raise ValueError(f"bad decimal in {plan!r}")
            c.nseg = 0
            if integral % 9:
                c.seg_bytes[c.nseg] = _DIG2BYTES[integral % 9]
                c.seg_digits[c.nseg] = integral % 9
                c.nseg += 1
            for k in range(integral // 9):
                c.seg_bytes[c.nseg] = 4
                c.seg_digits[c.nseg] = 9
                c.nseg += 1
            c.nint = c.nseg
            for k in range(scale // 9):
                c.seg_bytes[c.nseg] = 4
                c.seg_digits[c.nseg] = 9
                c.nseg += 1
            if scale % 9:
                c.seg_bytes[c.nseg] = _DIG2BYTES[scale % 9]
                c.seg_digits[c.nseg] = scale % 9
                c.nseg += 1
            c.dwidth = 0
            for k in range(c.nseg):
                c.dwidth += c.seg_bytes[k]
            if c.dwidth == 0 or c.dwidth > 40:
                raise ValueError(f"bad decimal in {plan!r}")
            if (c.out == O_D128) != (c.p1 <= 38) or (c.out != O_D128 and c.out != O_VAR):
                raise ValueError(f"bad decimal output in {plan!r}")
        if c.kind == K_BIT and (c.out == O_D128) != (c.p1 == 64):
            raise ValueError(f"bad bit output in {plan!r}")

    cdef void _reset(self) noexcept:
        cdef int i
        for i in range(self.dc.ncols):
            out_reset(&self.dc.after[i], self.dc.cols[i].out)
        for i in range(self.dc.nkeys):
            out_reset(&self.dc.old[i], self.dc.cols[self.dc.keys[i]].out)
        self.dc.ops.len = 0
        self.dc.rows = 0
        self.dc.olds = 0
        self.dc.kinds = 0

    def __dealloc__(self):
        cdef int i
        if self.dc.cols != NULL and self.dc.after != NULL:
            for i in range(self.dc.ncols):
                free(self.dc.cols[i].lab)
                free(self.dc.cols[i].lablen)
                out_free(&self.dc.after[i])
        if self.dc.old != NULL:
            for i in range(self.dc.nkeys):
                out_free(&self.dc.old[i])
        free(self.dc.cols)
        free(self.dc.after)
        free(self.dc.is_key)
        free(self.dc.keys)
        free(self.dc.old)
        free(self.dc.before_spans)
        free(self.dc.after_spans)
        free(self.dc.ops.data)

    @property
    def rows(self) -> int:
        return self.dc.rows

    def append(self, bytes body, int kind) -> int:
        """Appends the rows of one rows event (``kind`` 0 write, 1 update, 2 delete; ``body``
        the row images after the bitmaps, every column present): how many, or -1 when the
        event is refused (nothing appended)."""
        cdef Decoder* dc = &self.dc
        cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(body)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(body)
        cdef Py_ssize_t got, rows = dc.rows, ops = dc.ops.len, olds = dc.olds
        cdef int kinds = dc.kinds, i
        if not 0 <= kind <= 2:
            raise ValueError("kind is 0 (write), 1 (update) or 2 (delete)")
        if n == 0:
            return -1
        for i in range(dc.ncols):
            out_mark(&dc.after[i])
        for i in range(dc.nkeys):
            out_mark(&dc.old[i])
        if n >= _NOGIL_MIN:
            with nogil:
                got = decode_rows(dc, p, n, kind)
        else:
            got = decode_rows(dc, p, n, kind)
        if got <= 0:
            for i in range(dc.ncols):
                out_rollback(&dc.after[i], dc.cols[i].out)
            for i in range(dc.nkeys):
                out_rollback(&dc.old[i], dc.cols[dc.keys[i]].out)
            dc.rows, dc.ops.len, dc.olds, dc.kinds = rows, ops, olds, kinds
            return -1
        return got

    def clear(self) -> None:
        """Drops the rows appended so far."""
        self._reset()

    def finish(self) -> tuple:
        """(rows, kinds, ops bytes, after columns, old-key columns or None) and starts over.
        ``kinds``: bits 1 insert, 2 update keeping its key, 4 update moving it, 8 delete;
        a column: (validity bytes or None, null count, values bytes, data bytes or None)."""
        cdef Decoder* dc = &self.dc
        cdef int i
        rows = dc.rows
        after = [out_buffers(&dc.after[i], dc.cols[i].out, rows) for i in range(dc.ncols)]
        old = None
        if dc.olds:
            old = [out_buffers(&dc.old[i], dc.cols[dc.keys[i]].out, rows) for i in range(dc.nkeys)]
        ops = PyBytes_FromStringAndSize(dc.ops.data, dc.ops.len)
        result = (rows, dc.kinds, ops, after, old)
        self._reset()
        return result
