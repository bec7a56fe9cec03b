"""Decode-rate benchmark (not collected by pytest).

    .venv/bin/python tests/sources/postgres/bench_pgoutput.py            # pure decoder
    .venv/bin/python tests/sources/postgres/bench_pgoutput.py --e2e      # + private server
    .venv/bin/python tests/sources/postgres/bench_pgoutput.py --streamed --e2e  # streaming too

The synthetic stream mirrors the sample schema's orders table: transactions of one Begin,
six 8-column inserts, one update, one delete and a Commit (10 messages each).
``--streamed`` also sends the same messages as ONE streamed transaction (protocol 2 blocks of
64 messages) through ``StreamedTransactions``: spooled to disk, then replayed and decoded at
its Stream Commit, against decoding alone in the same run. ``--e2e`` streams real inserts through PostgresSource (replication protocol, decoding, type
conversion, ChangeEvent construction) and reports events/s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[2])]

import pg_testkit as kit  # noqa: E402

from replicator.checkpoint import Checkpoints  # noqa: E402
from replicator.sources.postgres.pgoutput import decode  # noqa: E402


def synthetic(n_tx: int) -> list[bytes]:
    msgs: list[bytes] = []
    lsn = 0x1000000
    for tx in range(n_tx):
        msgs.append(kit.begin(lsn + 512, 800_000_000_000_000 + tx, 1000 + tx))
        for i in range(6):
            oid = tx * 6 + i
            msgs.append(
                kit.insert(
                    16400,
                    [
                        str(oid),
                        str(oid % 997),
                        "paid",
                        f"{oid % 10000}.{oid % 100:02d}",
                        "2026-11-21 14:39:00.123456+00",
                        "2026-12-01",
                        "handle with care, fragile",
                        None,
                    ],
                )
            )
        msgs.append(
            kit.update(
                16400, [str(tx), "3", "shipped", "10.00", "2026-11-21 14:39:00+00", None, "x", None]
            )
        )
        msgs.append(kit.delete(16400, [str(tx), None, None, None, None, None, None, None]))
        msgs.append(kit.commit(lsn + 512, lsn + 560, 800_000_000_000_000 + tx))
        lsn += 1024
    return msgs


def bench_decode(n_tx: int, repeat: int) -> float:
    msgs = synthetic(n_tx)
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        for m in msgs:
            decode(m)
        rate = len(msgs) / (time.perf_counter() - t0)
        best = max(best, rate)
    print(f"decode: {len(msgs)} messages, best of {repeat}: {best:,.0f} messages/s")
    return best


def bench_streamed(n_tx: int, repeat: int) -> float:
    from replicator.sources.postgres.streamed import StreamedTransactions

    plain = [m for m in synthetic(n_tx) if m[:1] not in (b"B", b"C")]
    framed: list[bytes] = []
    for i in range(0, len(plain), 64):
        framed.append(kit.stream_start(7, i == 0))
        framed += [kit.in_stream(7, m) for m in plain[i : i + 64]]
        framed.append(kit.stream_stop())
    commit = kit.stream_commit(7, 0x2000000, 0x2000040, 800_000_000_000_000)
    best = 0.0
    with tempfile.TemporaryDirectory(prefix="rp-bench-streamed-") as where:
        for _ in range(repeat):
            st = StreamedTransactions(Path(where))
            t0 = time.perf_counter()
            for m in framed:
                for _ in st.feed(m):
                    pass
            n = sum(1 for _ in st.feed(commit))
            rate = len(plain) / (time.perf_counter() - t0)
            assert n == len(plain) + 2
            best = max(best, rate)
    print(f"streamed: {len(plain)} messages spooled, replayed and decoded, best of {repeat}: "
          f"{best:,.0f} messages/s")  # fmt: skip
    return best


def bench_e2e(rows: int, streaming: str = "off") -> None:
    import psycopg

    from replicator.events.deadletter import DeadLetterSink
    from replicator.sources.postgres import PostgresSource
    from sample_dbs.postgres.server import PrivatePostgres

    with PrivatePostgres(tempfile.mkdtemp(prefix="rp-bench-")) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            c.execute(
                "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, status text,"
                " total numeric(12,2), placed_at timestamptz, ship_by date, notes text,"
                " flag boolean)"
            )
        # 64kB: the server streams the transaction (when streaming is on) instead of spilling.
        dsn = pg.dsn + " options='-c logical_decoding_work_mem=64kB'"
        src = PostgresSource(dsn, dead_letters=DeadLetterSink(None), progress=False, streaming=streaming)  # type: ignore[arg-type]
        src.start(Checkpoints.at({}))
        list(src.poll())  # empty snapshot
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            c.execute(
                "INSERT INTO orders SELECT g, g %% 997, 'paid', g %% 10000 + 0.25, now(),"
                " current_date, 'handle with care, fragile', g %% 2 = 0"
                " FROM generate_series(1, %s) g",
                (rows,),
            )
        got = 0
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        first = 0.0
        while got < rows:
            for _ in src.poll():
                if not got:
                    first = time.perf_counter()  # the server decoded the whole transaction
                got += 1
        end = time.perf_counter()
        cpu = time.process_time() - cpu0
        print(
            f"e2e (streaming {streaming}): {got} insert events in {end - t0:.2f}s, {first - t0:.2f}s until the first "
            f"(server-side decoding of the one big transaction); then {got / (end - first):,.0f}"
            f" events/s (receive + decode + convert + ChangeEvent); {got / cpu:,.0f} events per"
            " CPU-second of this process"
        )
        src.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tx", type=int, default=30000, help="synthetic transactions (x10 messages)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--streamed", action="store_true")
    ap.add_argument("--rows", type=int, default=200000)
    args = ap.parse_args()
    bench_decode(args.tx, args.repeat)
    if args.streamed:
        bench_streamed(args.tx, args.repeat)
    if args.e2e:
        for streaming in ("off", "on") if args.streamed else ("off",):
            bench_e2e(args.rows, streaming)


if __name__ == "__main__":
    main()
