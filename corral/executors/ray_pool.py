"""The pool of warm worker actors: a few idle actors on every node, so that a launch does not
wait for Ray to start a worker process (the longest step of starting a gang otherwise).

Every alive node keeps PER_NODE detached actors (ray_worker.WorkerActor) with fixed names,
`corral-pool-STATE-NODEID-I` (STATE: a hash of the state dir, so two corral deployments on
one cluster keep apart). The inventory helper (ray_inventory.py) creates whichever of these
names is missing, every half second, and writes those that are up to STATE/ray/pool.json;
nothing else creates them, and only a clean stop of `corral up` kills them (the idle ones).
An attempt's supervisor claims one per worker by name (the actor's claim is atomic), falls
back to an actor of its own for a worker that finds none idle, and releases them at the end:
a released actor kills what is left of its attempt and waits for the next.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import random
import time
from pathlib import Path
from typing import Any

from corral.executors.rundir import read_json, write_json_atomic

log = logging.getLogger("corral.ray.pool")

PER_NODE = 2  # warm actors kept on every node: the workers one node can start at once, fast
CLAIM_TIMEOUT = 2.0  # seconds for an actor that is up to answer a claim
START_WAIT = 30.0  # the same for one the keeper is still starting
RETIRE_TIMEOUT = 5.0  # seconds for the idle actors to answer at a clean shutdown
PREFETCH_MAX = 256  # a spare supervisor reaches the pool's actors ahead if there are no more

_handles: dict[str, Any] = {}  # this driver's handles on the pool's actors, by name


def prefix(state_dir: Path) -> str:
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
    return f"corral-pool-{digest}-"


def names(state_dir: Path, node_id: str) -> list[str]:
    return [f"{prefix(state_dir)}{node_id}-{i}" for i in range(PER_NODE)]


@functools.cache
def actor_class() -> Any:
    """The worker actor, as Ray runs it: threads, so a poll is answered while start waits;
    no CPU, so Ray never waits for one to place it; never restarted (a restart would have
    lost its worker)."""
    import ray

    from corral.executors.ray_worker import WorkerActor

    return ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)(WorkerActor)


class Keeper:
    """Keeps the pool full (the inventory helper, every half second) and writes which of its
    actors are up (STATE_DIR/ray/pool.json), so a launch asks only those."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = Path(state_dir) / "ray" / "pool.json"
        self.pings: dict[Any, str] = {}  # an answer says the actor is up
        self.up: set[str] = set()
        write_json_atomic(self.path, [])

    def keep(self, node_ids: list[str]) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        have = set(ray.util.list_named_actors())
        asked = set(self.pings.values())
        for node_id in node_ids:
            for name in names(self.state_dir, node_id):
                if name in self.up or name in asked:
                    continue
                if name in have:  # a previous helper's: adopted
                    with contextlib.suppress(ValueError):
                        self.pings[ray.get_actor(name).ping.remote()] = name
                    continue
                with contextlib.suppress(ValueError):  # taken meanwhile: it exists, as wanted
                    actor = (
                        actor_class()
                        .options(
                            name=name,
                            lifetime="detached",  # it outlives the helper, and `corral up`
                            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                        )
                        .remote()
                    )
                    self.pings[actor.ping.remote()] = name
                    log.info("pool: started %s", name)
        up = self.up & have
        if self.pings:
            ready, _ = ray.wait(list(self.pings), num_returns=len(self.pings), timeout=0)
            for ref in ready:
                name = self.pings.pop(ref)
                with contextlib.suppress(ray.exceptions.RayError):  # died starting: redone
                    ray.get(ref)
                    up.add(name)
        if up != self.up:
            self.up = up
            write_json_atomic(self.path, sorted(up))


def retire(state_dir: Path) -> None:
    """Kill the pool's idle actors (a clean shutdown of `corral up`); those an attempt holds
    go back to idle when it ends, and the next `corral up` on this state dir uses them."""
    import ray

    mine = [n for n in ray.util.list_named_actors() if n.startswith(prefix(state_dir))]
    actors = []
    for name in mine:
        with contextlib.suppress(ValueError):
            actors.append(ray.get_actor(name))
    refs = {actor.retire.remote(): actor for actor in actors}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=RETIRE_TIMEOUT)
    for ref in ready:
        with contextlib.suppress(Exception):
            if ray.get(ref):
                ray.kill(refs[ref])


def prefetch(state_dir: Path) -> None:
    """Look up the pool's actors and reach each once, before a launch needs them (a spare
    supervisor, while it waits): a driver's first call to an actor costs a lookup and a
    connection. Only for a small pool: a big one is looked up as launches need it."""
    up = read_json(Path(state_dir) / "ray" / "pool.json") or []
    for name in up[:PREFETCH_MAX]:
        with contextlib.suppress(ValueError):  # gone since
            _handle(name).ping.remote()  # its answer does not matter: the connection does


def claim(state_dir: Path, node_ids: list[str], owner: str) -> list[tuple[str, Any] | None]:
    """For each worker (the Ray node it runs on), an idle pooled actor there, now `owner`'s:
    (its name, its handle), or None where none could be had. The workers ask at once, each
    its next actor if the first was taken: first those the keeper has seen up, then those it
    is starting (a node that just joined), waited for rather than starting one more."""
    import ray

    up = set(read_json(Path(state_dir) / "ray" / "pool.json") or [])
    untried = []
    for node_id in node_ids:
        candidates = names(state_dir, node_id)
        random.shuffle(candidates)  # two launches at once rarely ask the same actor first
        untried.append(sorted(candidates, key=lambda n: n in up))  # popped from the end
    got: list[tuple[str, Any] | None] = [None] * len(node_ids)
    while True:
        asking = {}
        chosen = {g[0] for g in got if g is not None}
        for i, candidates in enumerate(untried):
            while got[i] is None and candidates:
                name = candidates.pop()
                if name not in chosen and name not in asking.values():
                    asking[i] = name
                    break
        if not asking:
            return got
        # An answer that comes after `until` is a refusal: no actor is left claimed by a
        # launch that stopped waiting.
        wait = CLAIM_TIMEOUT if up.issuperset(asking.values()) else START_WAIT
        until = time.time() + wait
        refs = {}
        for i, name in asking.items():
            with contextlib.suppress(ValueError):  # not there (any more): not asked
                refs[_handle(name).claim.remote(owner, until)] = i
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=wait)
        for ref in ready:
            i = refs[ref]
            try:
                pid = ray.get(ref)
            except ray.exceptions.RayError as err:  # gone since: the keeper replaces it
                log.info("pool: %s not usable: %s", asking[i], type(err).__name__)
                _handles.pop(asking[i], None)
                continue
            if pid is not None:
                log.info("pool: %s (pid %d) is %s's", asking[i], pid, owner)
                got[i] = asking[i], _handle(asking[i])


def _handle(name: str) -> Any:
    import ray

    if name not in _handles:
        _handles[name] = ray.get_actor(name)
    return _handles[name]
