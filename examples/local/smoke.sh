#!/bin/bash
# A smoke check of `gpufleet serve --local` on this machine's GPUs, end to end through the CLI,
# as root (tenants run as `nobody`): a CUDA check through PyTorch (one GPU, its UUID), what a
# tenant's run sees in /proc, isolation (device nodes, cgroup limits and an OOM kill, file
# modes, another tenant and another Unix user reading nothing), the DCGM gauges of a busy run, a cancel (SIGTERM), a DDP gang
# of two over gloo, describe/get/alerts, and a restart of serve. Prints what it sees: read it.
#   examples/local/smoke.sh                                  # the GPUs through NVML
#   FAKE=examples/agent/fake-gpus.yaml examples/local/smoke.sh   # no GPU: the fake NVML
# OUT=DIR keeps the server's log there (default /tmp/devout); GPUFLEET=CMD runs another CLI
# than the `gpufleet` on PATH; PY is the jobs' interpreter (default python3, with PyTorch).
set -u
OUTDIR=${OUT:-/tmp/devout}; mkdir -p $OUTDIR
read -r -a GF <<< "${GPUFLEET:-gpufleet}"
gf() { "${GF[@]}" "$@"; }
W=/tmp/gfbox; rm -rf $W; mkdir -p $W; chmod 755 $W
PORT=18765
PY=${PY:-python3}
extra=(); [ -n "${FAKE:-}" ] && extra=(--fake-gpus "$FAKE")
"${GF[@]}" serve --local --db $W/gf.db --port $PORT --grace 5 --run-as research=nobody --run-as prod=nobody "${extra[@]}" > $OUTDIR/serve.log 2>&1 &
SERVE=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:$PORT/readyz >/dev/null && break; sleep 0.2; done
export GPUFLEET_SERVER=http://127.0.0.1:$PORT
export GPUFLEET_TOKEN=$(gf admin create-token --db $W/gf.db --tenant research)
CHECK='import os, torch; print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), "count", torch.cuda.device_count(), "name", torch.cuda.get_device_name(0), "sum", torch.ones(1000, device="cuda").sum().item(), "uid", os.getuid(), flush=True)'
[ -n "${FAKE:-}" ] && CHECK='import os; print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), "uid", os.getuid())'
echo "== run -f (1 GPU)"; time gf run --gpus 1 --queue research --name torchcheck -f -- $PY -c "$CHECK"; echo "exit $?"
echo "== run 0 GPUs (nothing visible)"; gf run --gpus 0 --queue research --name nogpu -f -- $PY -c 'import os; print("visible", repr(os.environ.get("CUDA_VISIBLE_DEVICES")), "nvidia", os.environ.get("NVIDIA_VISIBLE_DEVICES"))'
echo "== too many GPUs"; gf run --gpus 9 --queue research --name toomany -- true; echo "exit $?"
echo "== missing command"; gf run --gpus 1 --queue research --name nocmd -- no-such-command-x; echo "exit $?"
echo "== what a tenant's run sees in /proc"; gf run --gpus 0 --queue research --name ps -f -- ps -e -o user,pid,comm; echo "host sees $(ls /proc | grep -c '^[0-9]') processes"
echo "== isolation: the device nodes a 1-GPU run sees (only its own nvidia<N>, plus nvidiactl/uvm)"
gf run --gpus 1 --queue research --name devs -f -- sh -c 'ls /dev | grep -E "^nvidia" | tr "\n" " "; echo; ls /dev/nvidia-caps 2>/dev/null | tr "\n" " "; echo'
echo "host has: $(ls /dev | grep -E '^nvidia' | tr '\n' ' ')"
echo "device fence (v1 devices cgroup or v2 device program; a line here means none): $(grep -iE 'device program|no cgroup can be written' $OUTDIR/serve.log | head -2)"
echo "== isolation: its cgroup and limits (--cpus 1 --memory 256Mi)"
gf run --gpus 0 --cpus 1 --memory 256Mi --queue research --name limits -f -- sh -c 'cat /proc/self/cgroup; for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max; do [ -r $f ] && echo "$f $(cat $f)"; done; true'
echo "== isolation: beyond its memory limit, OOMKilled (64Mi, allocates 512 MiB)"
gf run --gpus 0 --memory 64Mi --queue research --name oom -f -- $PY -c 'b = bytearray(512 << 20); print("survived", len(b))'; echo "exit $?"
gf describe workload oom | grep -E "OOMKilled|exit code" | head -3
echo "== isolation: file modes of the state directory (folders 0711/0700, files 0600, the database 0600)"
STATE=$W/gf.db.local
stat -c '%a %U %n' $W/gf.db $STATE $STATE/runs $STATE/runs/* 2>/dev/null | head -8
stat -c '%a %U %n' $STATE/runs/*/spec.json $STATE/runs/*/output.log 2>/dev/null | head -6
echo "== isolation: another tenant's run (prod, also nobody) reads none of research's files"
PROD_TOKEN=$(gf admin create-token --db $W/gf.db --tenant prod)
GPUFLEET_TOKEN=$PROD_TOKEN gf run --gpus 0 --queue prod --name peek -f -- sh -c "cat $STATE/runs/*/output.log $STATE/runs/*/spec.json $W/gf.db 2>&1 | head -4; true"
echo "== isolation: as a second Unix user (daemon), outside gpufleet"
su -s /bin/sh daemon -c "cat $STATE/runs/*/spec.json $W/gf.db 2>&1 | head -3" 2>&1 || true
echo "== a busy one: metrics while it runs, then stopped by cancel"
BUSY=$'import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(0)))\nprint("busy", flush=True)\ntry:\n    import torch\n    a = torch.randn(8192, 8192, device="cuda")\n    while True:\n        a = (a @ a).clamp(-1, 1)\nexcept ImportError:\n    time.sleep(600)'
gf run --gpus 1 --queue research --name busy -- $PY -c "$BUSY"
sleep 20; gf get workloads
curl -s http://127.0.0.1:$PORT/metrics | grep -E "^DCGM_FI_DEV_(GPU_UTIL|FB_USED|POWER_USAGE)" | head -8
gf delete workload busy; sleep 3; gf logs busy
if [ -z "${FAKE:-}" ]; then
echo "== a DDP gang of 2 (gloo), all_reduce through the rendezvous variables"
cat > $W/ddp.yaml <<YAML
apiVersion: batch/v1
kind: Job
metadata: {name: ddp}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          command: [$(command -v python3), -c, "import torch, torch.distributed as d; d.init_process_group('gloo'); t = torch.ones(1) * (d.get_rank() + 1); d.all_reduce(t); print('rank', d.get_rank(), 'of', d.get_world_size(), 'sum', t.item(), flush=True)"]
YAML
gf submit -f $W/ddp.yaml; sleep 12; gf get workloads; gf logs ddp; gf logs ddp --pod ddp-1
fi
echo "== describe"; gf describe workload torchcheck
echo "== get"; gf get workloads
echo "== metrics"; curl -s http://127.0.0.1:$PORT/metrics | grep -E "^(DCGM_FI_DEV_GPU_UTIL|gpufleet_gpu)" | head -12
echo "== alerts"; gf alerts 2>&1 | head -20
echo "== restart serve, runs kept"; kill -TERM $SERVE; wait $SERVE
"${GF[@]}" serve --local --db $W/gf.db --port $PORT --grace 5 --run-as research=nobody --run-as prod=nobody "${extra[@]}" >> $OUTDIR/serve.log 2>&1 &
SERVE=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:$PORT/readyz >/dev/null && break; sleep 0.2; done
gf get workloads
kill -TERM $SERVE; wait $SERVE
echo "== serve log"; tail -30 $OUTDIR/serve.log
