"""Preemption: whom to evict so that a workload that did not get in would.

Kueue's preemptor owns both halves, and so does this package: who may be a victim at all
(:mod:`.reclaim`: Kueue's classical rules on the queue tree), and the search for the cheapest
set of victims whose eviction lets the preemptor pass its quota and place (:mod:`.victims`).

What it does not do: evict (the core does, once a set is found), or hold the room the victims
free for the preemptor.
"""
