"""The supervisor of one attempt on Ray: a detached process and a Ray driver.

Run as `python -m corral.executors.ray_supervisor RUN_DIR ADDRESS`, or with
`--spare=STATE_DIR ADDRESS` as a driver already connected (and in touch with the pool's warm
actors, ray_pool.py) that waits for its RUN_DIR on stdin (the executor keeps spares ready, so
a launch does not wait for Python and `ray.init()`). It keeps the local supervisor's
run directory protocol (rundir.py), so the executor, adoption after a control-plane restart and
`lost` work exactly as for the local executor: it survives a SIGKILL of `corral up`, and if it
dies itself its actors' hosts kill the gang: an actor of its own dies with it (it belongs to
its driver), a pooled one once its lease runs out (ray_worker.py).

The gang is corral's, not Ray's: one placement group per attempt, one bundle per worker pinned
to the node corral chose; one actor per worker (ray_worker.py), claimed from the pool of warm
actors on that node (ray_pool.py) where it has an idle one. Worker 0's node gives
MASTER_ADDR and picks MASTER_PORT and MEGASCALE_PORT. The first worker failure, actor death or
node death stops the others: SIGTERM to every worker's group, the grace, SIGKILL; then the
actors and the placement group go. Worker logs are copied into the state dir every TICK.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral.executors import ray_pool
from corral.executors.base import (
    LOST,
    TERMINATED,
    AttemptExit,
    Launch,
)
from corral.executors.ray_inventory import alive_nodes, connect, read_nodes
from corral.executors.ray_worker import LeaseLost
from corral.executors.rundir import ProcessRef, RunDir, read_json, write_json_atomic
from corral.executors.supervisor import Gang, Signals, claim, record_failure

log = logging.getLogger("corral.ray.supervisor")

TICK = 0.2  # seconds between polls of the workers (exits, logs)
CALL_TIMEOUT = 30.0  # seconds for an actor call before the attempt is given up
RELEASE_TIMEOUT = 15.0  # seconds for the actors to say nothing of the attempt is left
PLACE_TIMEOUT = 30.0  # a pinned bundle that cannot be placed would wait forever without it
BUNDLE = {"CPU": 0.001}  # a bundle needs some resource; corral, not Ray, accounts for devices


class NodeLost(Exception):
    """A node the gang needs is gone (or its bundle cannot be placed): the attempt is lost."""


class RayGang(Gang):
    def __init__(self, run: RunDir, launch: Launch, signals: Signals) -> None:
        super().__init__(run, launch, signals)
        n = len(launch.workers)
        self.owner = str(run.path)  # how the gang's actors know their attempt's calls
        self.actors: list[Any] = []
        self.pooled: list[bool] = []  # whether each actor is the pool's (else our own)
        self.pg: Any = None
        self.polls: dict[Any, int] = {}  # poll calls not answered yet -> worker index
        self.live = [False] * n  # the worker's host still runs (or its log is not drained)
        self.offsets = [0] * n  # bytes of each worker's log on its node copied so far
        self.phases: dict[str, float] = {}  # wall time each step of starting the gang ended

    def phase(self, name: str) -> None:
        """Note that a step of starting the gang is done (phases.json: bench/bench_ray.py)."""
        self.phases[name] = time.time()
        log.info("%s", name)

    # --- placing ----------------------------------------------------------------------------

    def place(self) -> None:
        import ray
        from ray.util.placement_group import placement_group

        nodes = {n.name: n for n in read_nodes(self.run.state_dir)}
        workers = self.launch.workers
        gone = sorted({w.node for w in workers} - nodes.keys())
        if gone:
            raise NodeLost(f"node {', '.join(gone)} is not in the Ray pool")
        self.pg = placement_group(
            [BUNDLE] * len(workers),
            name=f"corral-{self.run.job_id}-{self.run.attempt}",
            bundle_label_selector=[{"ray.io/node-id": nodes[w.node].node_id} for w in workers],
        )
        placed = self.pg.ready()  # Ray places it while we claim pooled actors
        node_ids = [nodes[w.node].node_id for w in workers]
        for got in ray_pool.claim(self.run.state_dir, node_ids, self.owner):
            self.actors.append(got[1] if got else None)
            self.pooled.append(got is not None)
        self.phase("claimed")
        try:
            ray.get(placed, timeout=PLACE_TIMEOUT)
        except ray.exceptions.GetTimeoutError:
            raise NodeLost(f"Ray could not place the gang in {PLACE_TIMEOUT:g}s") from None
        self.phase("placed")
        self.start_own_actors()
        need = 1 + (self.launch.num_slices > 1)
        ports = self.call(self.actors[0].free_ports.remote(self.owner, need))
        self.phase("actors")
        log.info("ports %s on %s", ports, workers[0].node)
        self.launch = replace(
            self.launch,
            master_addr=nodes[workers[0].node].address,
            master_port=ports[0],
            megascale_port=ports[-1] if need > 1 else 0,
        )
        write_json_atomic(self.run.file("launch.json"), self.launch.to_dict())

    def start_own_actors(self) -> None:
        """An actor of this attempt's own, in its bundle, for each worker whose node had no
        idle pooled actor: slower (Ray starts a worker process), gone with the attempt."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        own = [i for i, actor in enumerate(self.actors) if actor is None]
        for i in own:
            strategy = PlacementGroupSchedulingStrategy(self.pg, i)
            self.actors[i] = ray_pool.actor_class().options(scheduling_strategy=strategy).remote()
        if own:
            log.info("no idle pooled actor for workers %s: starting their own", own)
            self.call([self.actors[i].claim.remote(self.owner, math.inf) for i in own])

    def start_workers(self) -> None:
        if self.launch.max_runtime is not None:
            self.deadline = time.monotonic() + self.launch.max_runtime
        data, marker, hide = self.launch.to_dict(), str(self.run.path), [str(self.run.state_dir)]
        self.call(
            [a.start.remote(self.owner, data, i, marker, hide) for i, a in enumerate(self.actors)]
        )
        self.live = [True] * len(self.actors)
        self.phase("started")
        write_json_atomic(self.run.file("phases.json"), self.phases)
        log.info("gang started: %s", [w.node for w in self.launch.workers])

    def call(self, refs: Any) -> Any:
        """ray.get, with an actor's death meaning its node (or the actor) is lost."""
        import ray

        try:
            return ray.get(refs, timeout=CALL_TIMEOUT)
        except (ray.exceptions.RayActorError, LeaseLost) as err:
            raise NodeLost(f"{self.gone_nodes()} was lost ({type(err).__name__})") from None

    def gone_nodes(self) -> str:
        """The gang's nodes that have left the Ray pool, for a message."""
        import ray

        alive = {n.name for n in alive_nodes(ray.nodes())}
        gone = sorted({w.node for w in self.launch.workers} - alive)
        return f"node {', '.join(gone)}" if gone else "an actor of the gang"

    # --- the loop ---------------------------------------------------------------------------

    def supervise(self) -> AttemptExit:
        self.phase("taken")
        try:
            if not self.signals.stop_requested:
                self.place()
            if not self.signals.stop_requested:
                self.start_workers()
        except NodeLost as err:
            log.warning("attempt lost: %s", err)
            self.outcome, self.message = LOST, str(err)
        if self.outcome is None and not any(self.live):
            self.outcome = TERMINATED  # stopped before it started
        while True:
            self.poll_workers()
            self.advance()
            if self.settled():
                return self.finish()
            self.sleep()

    def poll_workers(self) -> None:
        """Take the actors' answers that are in, then ask again every live worker's actor
        not asked yet: an actor slow to answer (its node dying) holds up nobody else's."""
        import ray

        ready = []
        if self.polls:
            ready, _ = ray.wait(list(self.polls), num_returns=len(self.polls), timeout=0)
        for ref in ready:
            i = self.polls.pop(ref)
            try:
                code, alive, chunk = ray.get(ref)
            except ray.exceptions.RayError as err:  # the actor died, or is not ours any more
                self.worker_lost(i, f"actor died: {type(err).__name__}")
                continue
            if chunk:
                with open(self.run.worker_log(i), "ab") as out:
                    out.write(chunk)
                self.offsets[i] += len(chunk)
            if code is not None and self.codes[i] is None:
                self.record_exit(i, code)
            self.live[i] = alive or bool(chunk)  # one more poll drains the log's tail
            if not self.live[i] and self.codes[i] is None:  # else the gang would wait for ever
                self.worker_lost(i, "its host is gone without an exit code")
        asked = set(self.polls.values())
        for i, actor in enumerate(self.actors):
            if self.live[i] and i not in asked:
                self.polls[actor.poll.remote(self.owner, self.offsets[i])] = i

    def worker_lost(self, index: int, why: str) -> None:
        """Nothing of the worker is left (a host kills its worker when its actor dies)."""
        self.live[index] = False
        node = self.launch.workers[index].node
        log.warning("worker %d on node %s: %s", index, node, why)
        if self.outcome is None:
            self.outcome, self.message = LOST, f"worker {index} on node {node}: {why}"
            self.kill_at = time.monotonic()
            self.signal_all(signal.SIGKILL)  # a lost gang is requeued: no grace to wait for

    def signal_all(self, sig: int) -> None:
        for i, actor in enumerate(self.actors):
            if self.live[i]:
                actor.signal.remote(self.owner, int(sig))

    def workers_gone(self) -> bool:
        return not any(self.live)

    def sleep(self) -> None:
        ready, _, _ = select.select([self.signals.wake_fd], [], [], TICK)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self.signals.wake_fd, 512):
                    pass

    def finish(self) -> AttemptExit:
        self.release()
        return self.record_result()

    def release(self) -> None:
        """Nothing of the attempt is left on any node: each actor's host kills what is left
        of its worker and exits; pooled actors go back to the pool, our own and the
        placement group go."""
        import ray
        from ray.util.placement_group import remove_placement_group

        refs = [
            actor.release.remote(self.owner, reuse)
            for actor, reuse in zip(self.actors, self.pooled, strict=False)
            if actor is not None
        ]
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=RELEASE_TIMEOUT)
        for actor, pooled in zip(self.actors, self.pooled, strict=False):
            if actor is not None and not pooled:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
        if self.pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.pg)


def warm_up() -> None:
    """What placing a gang imports, imported before the launch (a spare waits for it)."""
    import ray.util.placement_group
    import ray.util.scheduling_strategies  # noqa: F401

    ray_pool.actor_class()


def handle_signals(signals: Signals) -> None:
    """(Re)install our handlers: ray.init() may have put its own in place."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signals.handle)


def wait_for_run(stdin: Any) -> Path | None:
    """A spare's assignment: one line with the run dir, or EOF (the executor is gone)."""
    line = stdin.readline().strip()
    return Path(line) if line else None


def redirect_output(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m corral.executors.ray_supervisor (RUN_DIR | --spare=STATE_DIR)"
            " ADDRESS",
            file=sys.stderr,
        )
        return 2
    signals = Signals.install()
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s ray-supervisor[%(process)d] %(levelname)s %(message)s",
    )
    connect(args[1])
    warm_up()
    handle_signals(signals)
    if args[0].startswith("--spare="):
        state_dir = Path(args[0].removeprefix("--spare="))
        ray_pool.prefetch(state_dir)
        log.info(
            "spare ready, %.1fs after its start",
            time.time() - ProcessRef.of(os.getpid()).create_time,
        )
        path = wait_for_run(sys.stdin)
        if path is None:
            return 0
        redirect_output(path / "supervisor.log")
        log.info("spare supervisor takes %s", path)
    else:
        path = Path(args[0])
    return supervise(RunDir.from_path(path), signals)


def supervise(run: RunDir, signals: Signals) -> int:
    if not claim(run):
        log.info("another supervisor has this attempt; nothing to do")
        return 0
    write_json_atomic(run.file("supervisor.pid"), ProcessRef.of(os.getpid()).to_dict())
    if run.file("status.json").exists():
        return 0
    gang = None
    try:
        launch = Launch.from_dict(read_json(run.file("launch.json")))
        if launch.crypt_proxy:
            record_failure(run, "crypt_proxy: not available on the Ray executor yet")
            return 1
        signals.stop_requested |= run.file("stop.json").exists()
        gang = RayGang(run, launch, signals)
        gang.supervise()
    except Exception as err:
        log.exception("supervisor failed; the gang goes with its actors")
        if gang is not None:
            gang.release()
        record_failure(run, f"the supervisor failed: {type(err).__name__}: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
