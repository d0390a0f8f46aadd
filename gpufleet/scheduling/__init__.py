"""The scheduling core: cluster events in, actions out; pure, synchronous, deterministic, with no
I/O and no clock (:mod:`.core`; the cycle's steps and extension points are in
``docs/architecture.md``)."""
