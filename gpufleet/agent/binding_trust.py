"""Which pods' device bindings the agent honours: only those gpufleet's scheduler made.

Any pod author can write ``gpufleet.dev/gpu-index`` (and a pod placed with ``spec.nodeName``
or by another scheduler reaches the node without gpufleet ever seeing it). Owns
:class:`BindingTrust`, the agent's rule: a binding is honoured only for a pod whose
``spec.schedulerName`` is one of gpufleet's and whose ``gpufleet.dev/binding-signature``
verifies with the key the scheduler signs with, for this pod's UID on this node
(:mod:`gpufleet.io.kube.binding_signature`). With no key the agent honours nothing,
unless it was started with ``--insecure-unsigned-bindings`` (tests and demos only), which
keeps the scheduler-name check alone. Pure: it reads no key file and calls no server.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.agent.bound_pods import BoundPod
from gpufleet.io.kube.binding_signature import BindingKey, binding_signature_problem

#: The scheduler name gpufleet's scheduler uses by default (``gpufleet scheduler``).
DEFAULT_SCHEDULER_NAMES = frozenset({"gpufleet"})
#: The reason of the Event and of the refused Allocate for a binding not honoured.
UNTRUSTED_REASON = "UntrustedGpuBinding"


@dataclass(frozen=True, slots=True)
class BindingTrust:
    """The agent's rule for one node (see the module docstring); the default trusts nothing."""

    node: str = ""
    key: BindingKey | None = None
    scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES
    #: Honour unsigned bindings of gpufleet's pods (``--insecure-unsigned-bindings``).
    unsigned: bool = False

    def problem(self, pod: BoundPod) -> str:
        """Why ``pod``'s binding is not honoured (empty when it is)."""
        if pod.scheduler_name not in self.scheduler_names:
            names = ", ".join(sorted(self.scheduler_names))
            return (
                f"it was not placed by gpufleet's scheduler (spec.schedulerName "
                f"{pod.scheduler_name or 'unset'!r}, not {names}), so its gpufleet.dev/ "
                "annotations are not a binding"
            )
        if self.key is not None:
            return binding_signature_problem(self.key, pod.uid, self.node, pod.annotations)
        if self.unsigned:
            return ""
        return "this agent has no binding key to verify it with (--binding-key-file)"


#: Honours no binding at all: the rule of an agent given neither a key nor the insecure flag.
NO_TRUST = BindingTrust()
