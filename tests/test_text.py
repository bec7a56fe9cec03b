from replicator.text import text_table


def test_columns_align_to_their_widest_cell_numbers_to_the_right() -> None:
    lines = text_table(["table", "rows", "status"], [["a.t", "1,000", "match"], ["a.long_name", "7", "DIFFERS"]], right={1})
    assert lines == [
        "table         rows  status",
        "-----------  -----  -------",
        "a.t          1,000  match",
        "a.long_name      7  DIFFERS",
    ]
