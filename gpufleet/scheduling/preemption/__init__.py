"""Preemption: whom to evict so that a workload that did not get in would.

Kueue's preemptor owns both halves, and so does this package: who may be a victim at all
(:mod:`.reclaim`: Kueue's classical rules on the queue tree; :mod:`.candidates`: the same
rules on columns of each queue's running work, with the memos they need), and the search for
the cheapest set of victims whose eviction lets the preemptor pass its quota and place
(:mod:`.victims`). :mod:`.preemptor` joins them into the default post-filter plugin, which
also limits searches per cycle and wakes parked workloads when a new victim ripens.

What it does not do: evict (the core does, once a set is found), or hold the room the victims
free for the preemptor (:mod:`..holds`).
"""
