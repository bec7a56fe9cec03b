# Included by binlog_rows.pyx: one stored value of each column kind, decoded (or only
# checked, ``o`` NULL) into its column's buffers; the structs and buffer helpers are the
# module's. Each returns the bytes the value takes, or -1: the event is refused.


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
