"""Type stub of the compiled ``pgoutput_rows`` (pgoutput_rows.pyx)."""

Buffers = tuple[bytes, bytes, bytes, int]  # validity, int64 offsets, data, null count

def split(
    msgs: list[bytes], ncols: int, key_idx: tuple[int, ...]
) -> tuple[list[Buffers], list[Buffers] | None, bytes | None] | None: ...
