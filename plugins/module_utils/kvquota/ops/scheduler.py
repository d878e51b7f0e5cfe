# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drive mode's scheduler: which batch may start now (next_batch), how long to nap before the next look
(Scheduler.nap), and which finished batches have waited too long for their release (Scheduler.overdue). Pure.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    FINAL,
    PENDING,
    RELEASED,
    RUNNING,
)


def next_batch(batches, overlap=True):
    """The batch that may start now, or None. batches: objects with state, index, namespaces (of its VMs),
    held (the namespaces its reservation expanded) and launched (None while only prepared), in plan order.

    Nothing starts while a batch is in flight (its migrations created, not all final). A batch prepared while the
    previous one migrated (batch_ahead) goes next. overlap=True: of the pending batches none of whose namespaces is
    held by an unreleased reservation of this run, the one whose namespaces have the most pending batches
    left (then plan order): a namespace with many batches is not left for the end, where its batches could
    only follow each other, each waiting for the previous one's release. overlap=False: the first pending
    batch, once every started batch is released."""
    if any(b.state == RUNNING and b.launched is not None for b in batches):
        return None
    prepared = [b for b in batches if b.state == RUNNING]
    if prepared:
        return prepared[0]
    return _pick(batches, overlap, set())


def batch_ahead(batches, overlap=True):
    """The batch to prepare (reserve for, not start) while one batch migrates, or None: so that its migrations are
    created the moment that batch's are final, instead of after a reservation then. Only with overlap, one batch
    ahead at most, and never in a namespace the batch in flight (or an unreleased reservation) holds: no namespace's
    quota is expanded for two batches at once."""
    if not overlap:
        return None
    running = [b for b in batches if b.state == RUNNING]
    if len(running) != 1 or running[0].launched is None:
        return None
    return _pick(batches, overlap, set(running[0].namespaces) | set(running[0].held))


def _pick(batches, overlap, busy):
    """next_batch's choice among the pending batches; busy: namespaces held besides the finished batches'."""
    held = set(busy)
    pending = {}
    for b in batches:
        if b.state == FINAL:
            held |= set(b.held)
        elif b.state == PENDING:
            for namespace in b.namespaces:
                pending[namespace] = pending.get(namespace, 0) + 1
    best = None
    for b in batches:
        if b.state != PENDING:
            continue
        if not overlap:
            return None if held else b
        if set(b.namespaces) & held:
            continue
        left = max([pending[ns] for ns in b.namespaces] or [0])
        if best is None or left > best[0]:
            best = (left, b)
    return best[1] if best else None


class Scheduler(object):
    """Picks the next batch of a run (config: ExecutorConfig, batches: [Batch])."""

    def __init__(self, config, batches):
        self.config = config
        self.batches = batches

    def next(self):
        return next_batch(self.batches, self.config.overlap)

    def ahead(self):
        return batch_ahead(self.batches, self.config.overlap)

    def done(self):
        return all(b.state == RELEASED for b in self.batches)

    def overdue(self, now):
        """The finished batches whose release has waited longer than release_timeout while nothing is in flight
        (only releases are awaited then), or []."""
        waiting = [b for b in self.batches if b.state == FINAL]
        if not waiting or [b for b in self.batches if b.state == RUNNING]:
            return []
        if now - min(b.final_at for b in waiting) > self.config.release_timeout:
            return waiting
        return []

    def nap(self, now):
        """poll_interval, but a tenth of it (at least 50 ms) around the time the batch in flight should end (the
        shortest batch so far): the next batch, prepared meanwhile, starts within a fraction of a poll, without
        polling fast all the time."""
        poll = self.config.poll_interval
        took = [b.final_at - b.launched for b in self.batches if b.final_at is not None and b.launched is not None
                and b.state in (FINAL, RELEASED)]
        flying = [b for b in self.batches if b.state == RUNNING and b.launched is not None]
        if not took or not flying:
            return poll
        expected = flying[0].launched + min(took)
        if expected - poll <= now <= expected + 3 * poll:
            return max(0.05, poll / 10.0)
        return poll


__all__ = ["next_batch", "batch_ahead", "Scheduler"]
