# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""pgoutput Insert, Update and Delete messages of one relation split into text columns, in C.

``split`` takes a run of such messages (``sources/postgres/change_block.py`` keeps them
undecoded) and cuts every tuple into its values: each column of the new tuples, and the key
columns of the old-key ('K') tuples, come back as Arrow large-string buffers (validity bitmap,
int64 offsets, bytes); the caller types them. It replaces the numpy split there
(``_split``), whose fixed cost of a few dozen array calls per column dominated the small
blocks of a stream spread over many tables, and runs without the GIL.

The rules are the numpy split's: every message is an Insert with a new tuple ('N'), an
Update with a new tuple, optionally after an old-key tuple ('K'), or a Delete with an old-key
tuple; every tuple has ``ncols`` values, each text ('t', a 4-byte length under 2^31) or null
('n'); the message ends exactly after its last value. Anything else (unchanged TOAST 'u',
binary 'b', an old row 'O' of REPLICA IDENTITY FULL, a short or long message) refuses the
whole run: None, and the caller decodes it row by row. So does an old-key tuple when no key
columns are given or one of them is null (the per-row path decides those).
Pure: bytes in, buffers out, no I/O.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

cdef enum:
    K_INSERT = 73  # 'I'
    K_UPDATE = 85  # 'U'
    K_DELETE = 68  # 'D'
    T_NEW = 78     # 'N'
    T_KEY = 75     # 'K'
    V_TEXT = 116   # 't'
    V_NULL = 110   # 'n'


cdef Py_ssize_t parse_tuple(
    const uint8_t* p, Py_ssize_t end, Py_ssize_t pos, int ncols,
    int64_t* start, int64_t* length, const int* slot,
) noexcept nogil:
    """The tuple at ``pos``: column j's value start and length (-1: null) stored at
    ``slot[j]`` (-1: not kept); where the tuple ends, or -1 when it is not ``ncols`` text or
    null values inside ``end``."""
    cdef int j, s
    cdef uint32_t n
    if pos + 2 > end or ((<int> p[pos] << 8) | p[pos + 1]) != ncols:
        return -1
    pos += 2
    for j in range(ncols):
        if pos >= end:
            return -1
        s = slot[j]
        if p[pos] == V_TEXT:
            if pos + 5 > end:
                return -1
            n = ((<uint32_t> p[pos + 1] << 24) | (<uint32_t> p[pos + 2] << 16)
                 | (<uint32_t> p[pos + 3] << 8) | p[pos + 4])
            if n >= 0x80000000u or pos + 5 + <Py_ssize_t> n > end:
                return -1
            if s >= 0:
                start[s] = pos + 5
                length[s] = n
            pos += 5 + n
        elif p[pos] == V_NULL:
            if s >= 0:
                length[s] = -1
            pos += 1
        else:
            return -1
    return pos


cdef int split_all(
    const uint8_t** bufs, const Py_ssize_t* sizes, Py_ssize_t n, int ncols,
    const int* all_slots, const int* key_slots, int nkeys,
    int64_t* new_start, int64_t* new_len, int64_t* old_start, int64_t* old_len,
    uint8_t* codes, int* kinds_seen,
) noexcept nogil:
    """Every message cut (row i's values at ``i * ncols`` / ``i * nkeys``); 0, or -1 to
    refuse. ``kinds_seen``: bit 1 insert, 2 update, 4 delete, 8 an old-key tuple."""
    cdef Py_ssize_t i, pos, end
    cdef const uint8_t* p
    cdef uint8_t kind, b5
    cdef int has_old, k
    cdef int seen = 0
    for i in range(n):
        p, end = bufs[i], sizes[i]
        if end < 8:
            return -1
        kind, b5 = p[0], p[5]
        has_old = 0
        if kind == K_INSERT and b5 == T_NEW:
            codes[i] = 99  # 'c'
            seen |= 1
        elif kind == K_UPDATE and (b5 == T_NEW or b5 == T_KEY):
            codes[i] = 117  # 'u'
            seen |= 2
            has_old = b5 == T_KEY
        elif kind == K_DELETE and b5 == T_KEY:
            codes[i] = 100  # 'd'
            seen |= 4
            has_old = 1
        else:
            return -1
        pos = 6
        if has_old:
            seen |= 8
            if nkeys == 0:
                return -1
            pos = parse_tuple(p, end, pos, ncols, old_start + i * nkeys, old_len + i * nkeys, key_slots)
            if pos < 0:
                return -1
            for k in range(nkeys):
                if old_len[i * nkeys + k] < 0:
                    return -1  # a null in an old key: the per-row path decides
            if kind == K_UPDATE:
                if pos >= end or p[pos] != T_NEW:
                    return -1
                pos += 1
        elif nkeys:
            for k in range(nkeys):
                old_len[i * nkeys + k] = -1
        if kind == K_DELETE:
            for k in range(ncols):
                new_len[i * ncols + k] = -1
        else:
            pos = parse_tuple(p, end, pos, ncols, new_start + i * ncols, new_len + i * ncols, all_slots)
            if pos < 0:
                return -1
        if pos != end:
            return -1
    kinds_seen[0] = seen
    return 0


cdef tuple column(
    const uint8_t** bufs, Py_ssize_t n, const int64_t* start, const int64_t* length,
    Py_ssize_t stride,
):
    """One column (values at ``start[i * stride]``) as (validity, offsets, data, nulls)."""
    cdef Py_ssize_t i, total = 0, nulls = 0
    cdef int64_t ln
    for i in range(n):
        ln = length[i * stride]
        if ln < 0:
            nulls += 1
        else:
            total += ln
    cdef bytes valid = PyBytes_FromStringAndSize(NULL, (n + 7) // 8)
    cdef bytes offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 8)
    cdef bytes data = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* v = <uint8_t*> PyBytes_AS_STRING(valid)
    cdef int64_t* o = <int64_t*> PyBytes_AS_STRING(offsets)
    cdef char* d = PyBytes_AS_STRING(data)
    cdef int64_t at = 0
    with nogil:
        memset(v, 0, (n + 7) // 8)
        o[0] = 0
        for i in range(n):
            ln = length[i * stride]
            if ln >= 0:
                v[i >> 3] |= <uint8_t> (1 << (i & 7))
                memcpy(d + at, bufs[i] + start[i * stride], ln)
                at += ln
            o[i + 1] = at
    return (valid, offsets, data, nulls)


def split(list msgs, int ncols, tuple key_idx):
    """``msgs`` cut into columns: ``(new, old_keys, codes)``, or None (see the module doc).
    ``new``: one ``(validity, offsets, data, null_count)`` per column (a delete's values
    null); ``old_keys``: the same for the columns ``key_idx`` of the old-key tuples (null
    where a row has none), None when no row has one; ``codes``: b'c'/b'u'/b'd' per row, None
    for a run of one kind (all inserts, or all updates) without old-key tuples."""
    cdef Py_ssize_t n = len(msgs), i
    cdef int nkeys = len(key_idx), j, k, seen = 0, rc
    if n == 0 or ncols <= 0 or ncols > 0xFFFF:
        return None
    for k in range(nkeys):
        j = key_idx[k]
        if j < 0 or j >= ncols:
            return None
    cdef const uint8_t** bufs = <const uint8_t**> malloc(n * sizeof(uint8_t*))
    cdef Py_ssize_t* sizes = <Py_ssize_t*> malloc(n * sizeof(Py_ssize_t))
    cdef int* all_slots = <int*> malloc(ncols * sizeof(int))
    cdef int* key_slots = <int*> malloc(ncols * sizeof(int))
    cdef int64_t* new_start = <int64_t*> malloc(n * ncols * sizeof(int64_t))
    cdef int64_t* new_len = <int64_t*> malloc(n * ncols * sizeof(int64_t))
    cdef int64_t* old_start = <int64_t*> malloc((n * nkeys + 1) * sizeof(int64_t))
    cdef int64_t* old_len = <int64_t*> malloc((n * nkeys + 1) * sizeof(int64_t))
    cdef bytes codes = PyBytes_FromStringAndSize(NULL, n)
    cdef uint8_t* c = <uint8_t*> PyBytes_AS_STRING(codes)
    try:
        if (bufs == NULL or sizes == NULL or all_slots == NULL or key_slots == NULL
                or new_start == NULL or new_len == NULL or old_start == NULL or old_len == NULL):
            raise MemoryError()
        for i in range(n):
            m = msgs[i]
            if type(m) is not bytes:
                return None
            bufs[i] = <const uint8_t*> PyBytes_AS_STRING(m)
            sizes[i] = PyBytes_GET_SIZE(m)
        for j in range(ncols):
            all_slots[j] = j
            key_slots[j] = -1
        for k in range(nkeys):
            key_slots[<int> key_idx[k]] = k
        with nogil:
            rc = split_all(bufs, sizes, n, ncols, all_slots, key_slots, nkeys, new_start,
                           new_len, old_start, old_len, c, &seen)
        if rc < 0:
            return None
        new = [column(bufs, n, new_start + j, new_len + j, ncols) for j in range(ncols)]
        old = None
        if seen & 8:
            old = [column(bufs, n, old_start + k, old_len + k, nkeys) for k in range(nkeys)]
        one_kind = (seen & 7) == 1 or (seen & 7) == 2
        return new, old, (None if old is None and one_kind else codes)
    finally:
        free(bufs)
        free(sizes)
        free(all_slots)
        free(key_slots)
        free(new_start)
        free(new_len)
        free(old_start)
        free(old_len)
