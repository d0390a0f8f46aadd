"""The node agent's Kubernetes side: its own Node's labels and conditions, the pods bound to
that node (a field-selected informer), Events, all through the light client
(:mod:`gpufleet.kube_client.light_api`); :class:`.node_agent.NodeAgentApi` is their sum."""
