"""The tasks of a loop in key partitions, exchanging their changes (the executor's side).

On ``(data, time, diff)``: a loop whose state is larger than one task runs its in-task
program in ``P`` tasks of one barrier stage, each owning the keys that hash to it
(:func:`owners`).  Every table the program hands a keyed step (a stateful step's new
updates, by the step's key; the sources and the loop variable's change, by their data)
first goes to the tasks owning its rows (:meth:`Exchange.table`): a linear step commutes
with the union of the partitions, and a keyed one sees, in the task owning a key, every
update of that key, new or kept in its trace.  So each task computes exactly the answer's
updates of its keys, and only the changes travel: the traces stay where they were built.

The tasks find each other once (``BarrierTaskContext.allGather`` of their addresses) and
then talk over direct sockets, one connection from each task to each other, messages in
order per connection; the driver sees nothing but the addresses.  Each task makes a random
secret for the attempt and shares it with its address through Spark (whose RPC
``spark.authenticate`` protects): a connection that does not open with the secret of the
task it reaches is closed unread, so no one else on the network can send a task rows.  Every exchange is
collective (each task sends every other one a part, possibly empty, and waits for theirs),
which also keeps the tasks in step: the same iteration, the same step.
"""

from __future__ import annotations

import hmac
import queue
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from spark_differential.core.lazy import lazy
from spark_differential.errors import ExchangeError
from spark_differential.kernels import duck

np = lazy("numpy")
pa = lazy("pyarrow")

WAIT_SECONDS = 6 * 3600.0  # a task waits this long for another's part before giving up (a failed task's
# stage is cancelled by Spark well before)
_HEADER = struct.Struct("!q")
_SECRET_BYTES = 32
HANDSHAKE_SECONDS = 120.0  # a connection must present its rank and secret within this long


# ---------------------------------------------------------------------------------
# which task owns a row


_GOLDEN = 0x9E3779B97F4A7C15


def _mix(h: Any) -> Any:
    """splitmix64's finalizer on uint64 values (wrapping)."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _column_hash(column: Any) -> Any:
    """uint64 hashes of one column's values, equal for equal values (nulls equal to nulls),
    the same in every process: integers, booleans, dates, times and timestamps by their
    int64 value, anything else by DuckDB's ``hash``."""
    import pyarrow.compute as pc

    t = column.type
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    numeric = (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_date(t)
               or pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t))
    if numeric:
        as_int = column
        if pa.types.is_boolean(t):
            as_int = pc.cast(column, pa.int8())
        elif not pa.types.is_integer(t):
            as_int = column.view(pa.int64() if t.bit_width == 64 else pa.int32())
        values = np.asarray(pc.fill_null(as_int, 0).to_numpy(zero_copy_only=False)).astype(np.int64)
        h = values.view(np.uint64) if values.dtype == np.int64 else values.astype(np.uint64)
        h = _mix(h + np.uint64(_GOLDEN))
        if column.null_count:
            nulls = np.asarray(pc.is_null(column).to_numpy(zero_copy_only=False), dtype=bool)
            h[nulls] = np.uint64(_GOLDEN)
        return h
    out = duck.query('SELECT hash("c") AS h FROM $X', {"X": pa.table({"c": column})}).column(0)
    return np.asarray(out.to_numpy(zero_copy_only=False), dtype=np.uint64)


def owners(table: Any, columns: Sequence[str], parts: int) -> Any:
    """The task (``0..parts-1``) owning each row of ``table``: a hash of ``columns``' values
    (every row when ``columns`` is empty: task 0), the same in every process.

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [1, 2, 1, None], "s": ["a", "b", "a", None]})
    >>> o = owners(t, ["k", "s"], 4)
    >>> bool(o[0] == o[2]), all(0 <= x < 4 for x in o.tolist())
    (True, True)
    """
    n = table.num_rows
    if not columns or parts <= 1:
        return np.zeros(n, dtype=np.int64)
    h = np.full(n, _GOLDEN, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            h = _mix(h ^ _column_hash(table.column(c)))
    return (h % np.uint64(parts)).astype(np.int64)


# ---------------------------------------------------------------------------------
# the exchange


def _encoded(table: Any) -> bytes:
    if table.num_rows == 0:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return bytes(buf)


class Exchange:
    """All-to-all exchanges between the ``size`` tasks of one stage; this one is ``rank``.

    ``gather(address)`` returns every task's address by rank (``allGather`` of a barrier
    stage's tasks; a test's threads share a list); ``host`` is how the others reach this
    task's machine.  Each task listens on a port of its own, connects once to every other
    task, and reads what the others send on threads of its own, so a task sending a large
    part never waits on one sending to it."""

    def __init__(self, rank: int, size: int, gather: Callable[[str], Sequence[str]], host: str) -> None:
        self.rank, self.size = rank, size
        self._inbox: dict[int, queue.Queue[bytes | None]] = {q: queue.Queue() for q in range(size) if q != rank}
        self._out: dict[int, socket.socket] = {}
        self._threads: list[threading.Thread] = []
        self._secret = secrets.token_bytes(_SECRET_BYTES)
        self._heard: set[int] = set()  # the ranks whose connection presented this task's secret
        self._lock = threading.Lock()
        if socket.has_dualstack_ipv6():
            self._server = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            self._server = socket.create_server(("", 0))
        self._server.listen(max(1, size))
        port = self._server.getsockname()[1]
        accept = threading.Thread(target=self._accept, daemon=True, name="sd-exchange-accept")
        accept.start()
        addresses = list(gather(f"{host}|{port}|{self._secret.hex()}"))
        if len(addresses) != size:
            raise ExchangeError(f"expected the addresses of {size} tasks, got {len(addresses)}")
        for q in range(size):
            if q == rank:
                continue
            h, p, secret = addresses[q].rsplit("|", 2)
            try:
                conn = socket.create_connection((h, int(p)), timeout=120)
            except OSError as e:  # (it ended, or never listened: no exchange can take place)
                self.close()
                raise ExchangeError(f"task {q} of the loop's key partitions ended before this task (task {rank}) "
                                    f"connected to it ({e}); see that task's error") from e
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(_HEADER.pack(rank) + bytes.fromhex(secret))
            self._out[q] = conn
        self._rounds = 0

    def _accept(self) -> None:
        """Accept connections until the server closes: one reader thread each (a stranger's
        connection, closed by its reader, takes no peer's place)."""
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            t = threading.Thread(target=self._read, args=(conn,), daemon=True, name="sd-exchange-read")
            t.start()
            self._threads.append(t)

    def _handshake(self, conn: socket.socket) -> int | None:
        """The peer rank a new connection claims, if it presents this task's secret first (and
        no other connection claimed that rank); else ``None``."""
        conn.settimeout(HANDSHAKE_SECONDS)
        try:
            head = _read_exact(conn, _HEADER.size + _SECRET_BYTES)
        except OSError:
            return None
        conn.settimeout(None)
        if head is None or not hmac.compare_digest(head[_HEADER.size:], self._secret):
            return None
        sender = _HEADER.unpack(head[:_HEADER.size])[0]
        with self._lock:
            if sender not in self._inbox or sender in self._heard:
                return None
            self._heard.add(sender)
        return sender

    def _read(self, conn: socket.socket) -> None:
        sender = self._handshake(conn)
        if sender is None:
            conn.close()
            return
        box = self._inbox[sender]
        try:
            while True:
                head = _read_exact(conn, _HEADER.size)
                if head is None:
                    break
                n = _HEADER.unpack(head)[0]
                body = _read_exact(conn, n) if n else b""
                if body is None:
                    break
                box.put(body)
        except OSError:
            pass
        finally:
            box.put(None)
            conn.close()

    def all_to_all(self, parts: Sequence[bytes]) -> list[bytes]:
        """Send ``parts[q]`` to task ``q``; what every task sent this one, by rank."""
        self._rounds += 1
        for k in range(1, self.size):
            q = (self.rank + k) % self.size
            try:
                self._out[q].sendall(_HEADER.pack(len(parts[q])) + parts[q])
            except OSError as e:
                raise ExchangeError(f"could not send to task {q} of the loop's key partitions "
                                    f"(exchange {self._rounds}): {e}") from e
        got: list[bytes] = []
        for q in range(self.size):
            if q == self.rank:
                got.append(parts[q])
                continue
            try:
                msg = self._inbox[q].get(timeout=WAIT_SECONDS)
            except queue.Empty:
                raise ExchangeError(f"task {q} of the loop's key partitions sent nothing for {WAIT_SECONDS:.0f}s "
                                    f"(exchange {self._rounds})") from None
            if msg is None:
                raise ExchangeError(f"task {q} of the loop's key partitions ended before exchange {self._rounds}")
            got.append(msg)
        return got

    def table(self, table: Any, columns: Sequence[str]) -> Any:
        """``table``'s rows sent to the tasks owning them (:func:`owners` of ``columns``);
        the rows every task sent this one, with ``table``'s schema."""
        if self.size <= 1:
            return table
        own = owners(table, columns, self.size)
        parts = []
        for q in range(self.size):
            if q == self.rank:
                parts.append(b"")
                continue
            parts.append(_encoded(table.filter(pa.array(own == q))))
        mine = table.filter(pa.array(own == self.rank))
        pieces = [mine]
        for blob in self.all_to_all(parts):
            if blob:
                pieces.append(pa.ipc.open_stream(blob).read_all().cast(table.schema))
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    def gather(self, values: Sequence[int]) -> list[list[int]]:
        """Every task's ``values`` (int64), by rank."""
        blob = struct.pack(f"!{len(values)}q", *values)
        got = self.all_to_all([blob] * self.size)
        return [list(struct.unpack(f"!{len(b) // 8}q", b)) for b in got]

    def total(self, n: int) -> int:
        """``n`` summed over the tasks."""
        return sum(v[0] for v in self.gather([n]))

    def close(self) -> None:
        for conn in self._out.values():
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            conn.close()
        try:  # (a close alone leaves a listener blocked in accept taking connections)
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()


def barrier_exchange() -> Exchange:
    """The exchange of the calling task of a barrier stage (``BarrierTaskContext``)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    infos = ctx.getTaskInfos()
    host = str(infos[rank].address).rsplit(":", 1)[0] or socket.gethostname()
    return Exchange(rank, len(infos), lambda addr: ctx.allGather(addr), host)


__all__ = ["Exchange", "barrier_exchange", "owners"]
