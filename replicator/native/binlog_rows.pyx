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


cdef inline uint64_t le(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline uint64_t be(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


cdef inline int leap(int64_t y) noexcept nogil:
    return (y % 4 == 0 and y % 100 != 0) or y % 400 == 0


cdef inline int days_in_month(int64_t y, int64_t m) noexcept nogil:
    if m == 2:
        return 29 if leap(y) else 28
    if m == 4 or m == 6 or m == 9 or m == 11:
        return 30
    return 31


cdef inline int64_t days_from_civil(int64_t y, int64_t m, int64_t d) noexcept nogil:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    cdef int64_t era, yoe, doy, doe
    if m <= 2:
        y -= 1
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef inline int valid_date(int64_t y, int64_t m, int64_t d) noexcept nogil:
    """What Python's ``date(y, m, d)`` accepts (year 0 is a zero date: refused too)."""
    return 1 <= y <= 9999 and 1 <= m <= 12 and 1 <= d <= days_in_month(y, m)


cdef int utf8_ok(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 as Python's strict decoder takes it (no surrogates, no overlong
    forms, nothing past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint8_t a, b
    while i < n:
        a = s[i]
        if a < 0x80:
            i += 1
            continue
        if a < 0xC2:
            return 0
        if a < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return 0
            i += 2
            continue
        if a < 0xF0:
            if i + 2 >= n:
                return 0
            b = s[i + 1]
            if a == 0xE0:
                if b < 0xA0 or b > 0xBF:
                    return 0
            elif a == 0xED:
                if b < 0x80 or b > 0x9F:
                    return 0
            elif (b & 0xC0) != 0x80:
                return 0
            if (s[i + 2] & 0xC0) != 0x80:
                return 0
            i += 3
            continue
        if a > 0xF4 or i + 3 >= n:
            return 0
        b = s[i + 1]
        if a == 0xF0:
            if b < 0x90 or b > 0xBF:
                return 0
        elif a == 0xF4:
            if b < 0x80 or b > 0x8F:
                return 0
        elif (b & 0xC0) != 0x80:
            return 0
        if (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
            return 0
        i += 4
    return 1


cdef inline int json_space(uint8_t ch) noexcept nogil:
    return ch == 32 or ch == 9 or ch == 10 or ch == 13


cdef Py_ssize_t compact_json(char* s, Py_ssize_t n) noexcept nogil:
    """``types.compact_json`` in place (the regex ``("(?:[^"\\\\]|\\\\.)*")|[ \\t\\n\\r]+``
    replaced by its string group): a quote opens a string only when an unescaped quote
    closes it later; whitespace outside strings goes. Returns the new length."""
    cdef Py_ssize_t i = 0, w = 0, j
    cdef uint8_t ch
    while i < n:
        ch = <uint8_t> s[i]
        if ch == 34:  # '"'
            j = i + 1
            while j < n and <uint8_t> s[j] != 34:
                j += 2 if <uint8_t> s[j] == 92 else 1
            if j < n:  # closed at j: copied as it is
                memmove(s + w, s + i, j + 1 - i)
                w += j + 1 - i
                i = j + 1
                continue
            s[w] = s[i]
            w += 1
            i += 1
            continue
        if json_space(ch):
            i += 1
            continue
        s[w] = s[i]
        w += 1
        i += 1
    return w


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


cdef Py_ssize_t put_string(Col* c, const uint8_t* p, Py_ssize_t n, Out* o) noexcept nogil:
    """The value bytes ``p[:n]`` in the column's charset: -1 refused, else 0."""
    cdef Py_ssize_t i, start
    cdef const uint8_t* t
    cdef int64_t off
    if c.cs == CS_UTF8:
        if not utf8_ok(p, n):
            return -1
        if o == NULL:
            return 0
        if buf_put(&o.data, p, n) < 0:
            return -1
    elif c.cs == CS_TABLE:
        for i in range(n):
            if c.table[4 * p[i]] == 0:
                return -1  # a byte the charset does not define
        if o == NULL:
            return 0
        if buf_reserve(&o.data, 3 * n) < 0:
            return -1
        for i in range(n):
            t = c.table + 4 * p[i]
            memcpy(o.data.data + o.data.len, t + 1, t[0])
            o.data.len += t[0]
    else:
        if o == NULL:
            return 0
        if buf_put(&o.data, p, n) < 0:
            return -1
        if c.pad > n:
            if buf_reserve(&o.data, c.pad - n) < 0:
                return -1
            memset(o.data.data + o.data.len, 0, c.pad - n)
            o.data.len += c.pad - n
    if c.json:
        start = o.data.len - n if c.cs != CS_TABLE else -1
        if start < 0:
            return -1  # JSON text is UTF-8 here (a charset table makes it longer: not taken)
        o.data.len = start + compact_json(o.data.data + start, n)
    off = o.data.len
    return buf_put(&o.values, &off, 8)


cdef int put_text(Out* o, const char* s, Py_ssize_t n) noexcept nogil:
    cdef int64_t off
    if buf_put(&o.data, s, n) < 0:
        return -1
    off = o.data.len
    return buf_put(&o.values, &off, 8)


cdef int put_uint_text(char* buf, uint64_t v, int width) noexcept nogil:
    """Decimal digits of ``v`` into ``buf``, zero-padded to ``width`` (0: no padding);
    returns how many."""
    cdef char tmp[24]
    cdef int n = 0, i
    while v or n == 0:
        tmp[n] = <char> (48 + v % 10)
        v //= 10
        n += 1
    while n < width:
        tmp[n] = 48
        n += 1
    for i in range(n):
        buf[i] = tmp[n - 1 - i]
    return n


cdef Py_ssize_t dec_decimal(Col* c, const uint8_t* p, Py_ssize_t avail, Out* o) noexcept nogil:
    """MySQL's packed decimal (``rowimage._decimal``): digit groups big-endian, the sign in
    the first bit (set for >= 0), every byte inverted for a negative value. The unscaled
    integer is sum(group * 10**digits below it), computed exactly even for a group out of
    its digits' range (a server never writes one) as the Python decoder does; then
    decimal128 (refused unless it fits the precision, as Arrow refuses it) or the text
    ``format(Decimal, 'f')`` gives."""
    cdef uint8_t raw[40]
    cdef uint32_t segs[24]
    cdef int i, k, at, neg, allzero
    cdef rp_u128 acc
    if avail < c.dwidth:
        return -1
    memcpy(raw, p, c.dwidth)
    neg = (raw[0] & 0x80) == 0
    if neg:
        for i in range(c.dwidth):
            raw[i] = ~raw[i]
    raw[0] &= 0x7F
    at = 0
    allzero = 1
    for k in range(c.nseg):
        segs[k] = <uint32_t> be(raw + at, c.seg_bytes[k])
        at += c.seg_bytes[k]
        if segs[k]:
            allzero = 0
    if neg and allzero:
        return -1  # negative zero: the Python decoder leaves it to the library
    if o == NULL:
        return c.dwidth  # checked only: the value is not taken (a non-key column of an old row)
    if c.out == O_D128:
        acc = rp_u128_from_u64(0)
        for k in range(c.nseg):
            if rp_shift_add_checked(&acc, c.seg_digits[k], segs[k]):
                return -1
        if not rp_fits(acc, c.p1):
            return -1  # more digits than its precision: Arrow refuses the value
        if buf_reserve(&o.values, 16) < 0:
            return -1
        rp_put_i128(<uint8_t*> (o.values.data + o.values.len), acc, neg)
        o.values.len += 16
        return c.dwidth
    return c.dwidth if decimal_text(c, segs, neg, o) == 0 else -1


cdef int decimal_text(Col* c, uint32_t* segs, int neg, Out* o) noexcept nogil:
    """The unscaled integer of ``segs`` in base-10**9 limbs (exact for any group values),
    then its digits with the point ``c.p2`` digits from the right."""
    cdef uint32_t limbs[24]
    cdef int nl = 1, i, k, nd, tl, lead
    cdef uint64_t carry, mul
    cdef char digits[240]
    cdef char text[260]
    limbs[0] = 0
    for k in range(c.nseg):
        mul = RP_POW10(c.seg_digits[k])
        carry = segs[k]
        for i in range(nl):  # limbs * 10**d + seg
            carry += <uint64_t> limbs[i] * mul
            limbs[i] = <uint32_t> (carry % 1000000000)
            carry //= 1000000000
        while carry:
            limbs[nl] = <uint32_t> (carry % 1000000000)
            carry //= 1000000000
            nl += 1
    while nl > 1 and limbs[nl - 1] == 0:
        nl -= 1
    nd = put_uint_text(digits, limbs[nl - 1], 0)
    for i in range(nl - 2, -1, -1):
        nd += put_uint_text(digits + nd, limbs[i], 9)
    tl = 0
    if neg:
        text[tl] = 45
        tl += 1
    if c.p2 == 0:
        memcpy(text + tl, digits, nd)
        tl += nd
    elif nd <= c.p2:
        text[tl] = 48
        text[tl + 1] = 46
        tl += 2
        for i in range(c.p2 - nd):
            text[tl] = 48
            tl += 1
        memcpy(text + tl, digits, nd)
        tl += nd
    else:
        memcpy(text + tl, digits, nd - c.p2)
        tl += nd - c.p2
        text[tl] = 46
        tl += 1
        memcpy(text + tl, digits + nd - c.p2, c.p2)
        tl += c.p2
    return put_text(o, text, tl)


cdef inline uint32_t RP_POW10(int digits) noexcept nogil:
    cdef uint32_t v = 1
    cdef int i
    for i in range(digits):
        v *= 10
    return v


cdef Py_ssize_t dec_time(Col* c, const uint8_t* p, Py_ssize_t avail, Out* o) noexcept nogil:
    cdef int fb = (c.p1 + 1) // 2
    cdef int width = 3 + fb
    cdef int64_t packed, whole, frac, total, secs, h, m, s, us
    cdef bint neg
    cdef char text[40]
    cdef int tl = 0
    if avail < width:
        return -1
    if o == NULL:
        return width
    packed = <int64_t> be(p, width) - ((<int64_t> 0x800000) << (8 * fb))
    neg = packed < 0
    if neg:
        packed = -packed
    whole = packed >> (8 * fb)
    frac = packed & (((<int64_t> 1) << (8 * fb)) - 1)
    total = ((((whole >> 12) & 0x3FF) * 60 + ((whole >> 6) & 0x3F)) * 60 + (whole & 0x3F)) * 1000000
    total += frac * _TIME2_SCALE[fb]
    if neg and total:
        text[0] = 45
        tl = 1
    secs = total // 1000000
    us = total % 1000000
    h = secs // 3600
    m = (secs % 3600) // 60
    s = secs % 60
    tl += put_uint_text(text + tl, <uint64_t> h, 2)
    text[tl] = 58
    tl += 1
    tl += put_uint_text(text + tl, <uint64_t> m, 2)
    text[tl] = 58
    tl += 1
    tl += put_uint_text(text + tl, <uint64_t> s, 2)
    if us:
        text[tl] = 46
        tl += 1
        tl += put_uint_text(text + tl, <uint64_t> us, 6)
    if put_text(o, text, tl) < 0:
        return -1
    return width


cdef Py_ssize_t dec_value(Col* c, const uint8_t* p, Py_ssize_t avail, Out* o, Py_ssize_t row) noexcept nogil:
    """Decodes one non-NULL value at ``p`` (``avail`` bytes left) into ``o`` (NULL: only
    checked); returns the bytes it takes, or -1: refused."""
    cdef uint64_t u, mask
    cdef int64_t v, y, mo, d, us, secs
    cdef int n, w, i, first
    cdef int32_t i32
    cdef float f32
    cdef double f64
    cdef uint8_t d128[16]
    cdef Py_ssize_t length
    cdef char* start
    cdef int kind = c.kind
    w = c.width
    if kind == K_INT:
        if avail < w:
            return -1
        u = le(p, w)
        if c.sign and w < 8 and (u >> (8 * w - 1)) & 1:
            v = <int64_t> (u | (~(<uint64_t> 0) << (8 * w)))
        else:
            v = <int64_t> u
        if o == NULL:
            return w
        if c.out == O_I32:
            i32 = <int32_t> v
            return w if buf_put(&o.values, &i32, 4) == 0 else -1
        if c.out == O_I64:
            return w if buf_put(&o.values, &v, 8) == 0 else -1
        if buf_reserve(&o.values, 16) < 0:  # bigint unsigned: decimal(20,0)
            return -1
        rp_put_i128(<uint8_t*> (o.values.data + o.values.len), rp_u128_from_u64(u), 0)
        o.values.len += 16
        return w
    if kind == K_BOOL:
        if avail < w:
            return -1
        if o == NULL:
            return w
        return w if out_bit_value(o, row, le(p, w) != 0) == 0 else -1
    if kind == K_FLOAT:
        if avail < 4:
            return -1
        if o == NULL:
            return 4
        memcpy(&f32, p, 4)
        f64 = f32
        return 4 if buf_put(&o.values, &f64, 8) == 0 else -1
    if kind == K_DOUBLE:
        if avail < 8:
            return -1
        if o == NULL:
            return 8
        return 8 if buf_put(&o.values, p, 8) == 0 else -1
    if kind == K_DECIMAL:
        return dec_decimal(c, p, avail, o)
    if kind == K_STRING:
        if avail < w:
            return -1
        length = <Py_ssize_t> le(p, w)
        if length > avail - w:
            return -1
        if put_string(c, p + w, length, o) < 0:
            return -1
        return w + length
    if kind == K_DATE:
        if avail < 3:
            return -1
        u = le(p, 3)
        d = u & 31
        mo = (u >> 5) & 15
        y = <int64_t> (u >> 9)
        if not valid_date(y, mo, d):
            return -1  # a zero or invalid date: the exact path's policy
        if o == NULL:
            return 3
        i32 = <int32_t> days_from_civil(y, mo, d)
        return 3 if buf_put(&o.values, &i32, 4) == 0 else -1
    if kind == K_DATETIME:
        n = _FSP_BYTES[c.p1]
        if avail < 5 + n:
            return -1
        u = be(p, 5 + n)
        us = <int64_t> ((u & ((<uint64_t> 1 << (8 * n)) - 1)) // (10 if c.p1 % 2 else 1)) * _POW10[6 - c.p1]
        u >>= 8 * n
        y = <int64_t> ((u >> 22) & 0x1FFFF) // 13
        mo = <int64_t> ((u >> 22) & 0x1FFFF) % 13
        d = (u >> 17) & 31
        if not valid_date(y, mo, d) or ((u >> 12) & 31) > 23 or ((u >> 6) & 63) > 59 or (u & 63) > 59 or us > 999999:
            return -1
        if o == NULL:
            return 5 + n
        secs = ((<int64_t> ((u >> 12) & 31)) * 60 + <int64_t> ((u >> 6) & 63)) * 60 + <int64_t> (u & 63)
        v = (days_from_civil(y, mo, d) * 86400 + secs) * 1000000 + us
        return 5 + n if buf_put(&o.values, &v, 8) == 0 else -1
    if kind == K_TIMESTAMP:
        n = _FSP_BYTES[c.p1]
        if avail < 4 + n:
            return -1
        secs = <int64_t> <int32_t> <uint32_t> be(p, 4)
        us = <int64_t> (be(p + 4, n) // (10 if c.p1 % 2 else 1)) * _POW10[6 - c.p1]
        if secs == 0 and us == 0:
            return -1  # a zero timestamp: the exact path's policy
        if o == NULL:
            return 4 + n
        v = secs * 1000000 + us
        return 4 + n if buf_put(&o.values, &v, 8) == 0 else -1
    if kind == K_TIME:
        return dec_time(c, p, avail, o)
    if kind == K_YEAR:
        if avail < 1:
            return -1
        if o == NULL:
            return 1
        i32 = p[0] + 1900 if p[0] else 0
        return 1 if buf_put(&o.values, &i32, 4) == 0 else -1
    if kind == K_ENUM:
        if avail < w:
            return -1
        u = le(p, w)
        if u >= <uint64_t> c.nlabels:
            return -1
        if o == NULL:
            return w
        return w if put_text(o, c.lab[u], c.lablen[u]) == 0 else -1
    if kind == K_SET:
        if avail < w:
            return -1
        if o == NULL:
            return w
        u = le(p, w)
        first = 1
        for i in range(c.nlabels):
            if i < 64 and (u >> i) & 1:
                if not first and buf_put(&o.data, ",", 1) < 0:
                    return -1
                if buf_put(&o.data, c.lab[i], c.lablen[i]) < 0:
                    return -1
                first = 0
        return w if put_text(o, "", 0) == 0 else -1
    if kind == K_BIT:
        if avail < w:
            return -1
        if o == NULL:
            return w
        u = be(p, w)
        if c.p1 < 64:
            v = <int64_t> (u & ((<uint64_t> 1 << c.p1) - 1))
            return w if buf_put(&o.values, &v, 8) == 0 else -1
        if buf_reserve(&o.values, 16) < 0:
            return -1
        rp_put_i128(<uint8_t*> (o.values.data + o.values.len), rp_u128_from_u64(u), 0)
        o.values.len += 16
        return w
    return -1


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
