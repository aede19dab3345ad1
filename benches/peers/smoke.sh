#!/usr/bin/env bash
# smoke.sh — prove the Flux peers built by scripts/peers work against scripts/testenv's control
# plane, end to end, then stop everything it started:
#
#   benches/peers/smoke.sh [DIR]          (DIR defaults to /tmp/peers-try)
#
#  1. scripts/testenv up --dir DIR --no-kwok; apply Flux's CRDs
#  2. a bare Git repo DIR/peers/git/app.git (deploy/configmap.yaml), served by gitserver
#  3. source-controller and kustomize-controller as local processes on free loopback ports
#  4. a GitRepository (interval 1m) and a Kustomization (wait, prune, targetNamespace);
#     wait for Ready=True and check the ConfigMap landed in the target namespace
#  5. a second commit pushed over HTTP + a reconcile request on the GitRepository; wait until
#     the ConfigMap shows the new data
#  6. fluxssa applies 100 ConfigMaps once (and once more, a no-op)
#
# KEEP=1 leaves everything running (stop it with: benches/peers/smoke.sh --down DIR).
# The start commands here are the ones benches/peers/README.md documents.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
testenv="$root/scripts/testenv"

log() { printf 'smoke: %s\n' "$*" >&2; }
die() { printf 'smoke: error: %s\n' "$*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_for() { # description seconds command...
  local what=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready within ${secs}s; logs in $peers/logs"
    sleep 0.2
  done
}

start() { # name command... (own session, so `down` can stop its whole process group)
  local name=$1
  shift
  setsid "$@" >"$peers/logs/$name.log" 2>&1 </dev/null &
  echo "$! $name" >>"$peers/pids"
}

down() {
  if [[ -f "$peers/pids" ]]; then
    local pid name
    while read -r pid name; do
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    done < <(tac "$peers/pids")
    local deadline=$((SECONDS + 10))
    while read -r pid name; do
      while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    done <"$peers/pids"
    rm -f "$peers/pids"
  fi
  "$testenv" down --dir "$dir" || true
}

if [[ ${1:-} == --down ]]; then
  dir=${2:-/tmp/peers-try}
  peers="$dir/peers"
  down
  exit 0
fi

dir=${1:-/tmp/peers-try}
peers="$dir/peers"
pbin=$("$root/scripts/peers" check) || die "run scripts/peers build first"
crds=$("$root/scripts/peers" crds)
tbin=$("$testenv" check) || die "run scripts/testenv build first"
export PATH="$tbin:$PATH"

[[ -f "$peers/pids" ]] && die "$peers/pids exists: something runs; benches/peers/smoke.sh --down $dir"
rm -rf "$peers"
mkdir -p "$peers/logs"
[[ ${KEEP:-0} == 1 ]] || trap down EXIT

log "control plane in $dir"
eval "$("$testenv" up --dir "$dir" --no-kwok)"
export KUBECONFIG="$dir/admin.kubeconfig"

log "Flux CRDs from $crds"
kubectl apply --server-side -f "$crds" >/dev/null
kubectl wait --for condition=Established crd --all --timeout=60s >/dev/null

log "git repository"
mkdir -p "$peers/git" "$peers/work/deploy"
git init -q --bare -b main "$peers/git/app.git"
cat >"$peers/work/deploy/configmap.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: smoke
data:
  greeting: hello from flux
EOF
git -C "$peers/work" init -q -b main
git -C "$peers/work" add -A
git -C "$peers/work" -c user.name=smoke -c user.email=smoke@localhost commit -qm init
git -C "$peers/work" push -q "$peers/git/app.git" main

start gitserver "$pbin/gitserver" --root "$peers/git" --addr-file "$peers/gitserver.addr" --allow-push --quiet
wait_for gitserver 20 test -s "$peers/gitserver.addr"
git_addr=$(cat "$peers/gitserver.addr")
log "git server at http://$git_addr/app.git"

storage_port=$(free_port)
mkdir -p "$peers/sc-storage" "$peers/sc-tmp" "$peers/kc-tmp"
sc_health=$(free_port)
kc_health=$(free_port)
# The exact command lines benches/peers/README.md shows.
start source-controller env KUBECONFIG="$KUBECONFIG" TMPDIR="$peers/sc-tmp" \
  "$pbin/source-controller" \
  --storage-path="$peers/sc-storage" \
  --storage-addr="127.0.0.1:$storage_port" \
  --storage-adv-addr="127.0.0.1:$storage_port" \
  --metrics-addr="127.0.0.1:$(free_port)" \
  --health-addr="127.0.0.1:$sc_health" \
  --events-addr="" \
  --enable-leader-election=false \
  --watch-all-namespaces=true \
  --concurrent=2 \
  --log-level=info --log-encoding=json
start kustomize-controller env KUBECONFIG="$KUBECONFIG" TMPDIR="$peers/kc-tmp" \
  "$pbin/kustomize-controller" \
  --metrics-addr="127.0.0.1:$(free_port)" \
  --health-addr="127.0.0.1:$kc_health" \
  --events-addr="" \
  --enable-leader-election=false \
  --watch-all-namespaces=true \
  --concurrent=4 \
  --concurrent-ssa=4 \
  --log-level=info --log-encoding=json
wait_for source-controller 60 curl -fsS "http://127.0.0.1:$sc_health/readyz"
wait_for kustomize-controller 60 curl -fsS "http://127.0.0.1:$kc_health/readyz"
log "controllers ready"

kubectl create namespace flux-bench >/dev/null
kubectl create namespace smoke-target >/dev/null
t0=$(date +%s.%N)
kubectl apply -f - >/dev/null <<EOF
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: app
  namespace: flux-bench
spec:
  interval: 1m
  url: http://$git_addr/app.git
  ref:
    branch: main
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: app
  namespace: flux-bench
spec:
  interval: 1m
  sourceRef:
    kind: GitRepository
    name: app
  path: ./deploy
  prune: true
  wait: true
  timeout: 2m
  targetNamespace: smoke-target
EOF
if ! kubectl -n flux-bench wait --for=condition=Ready kustomization/app --timeout=180s >/dev/null; then
  kubectl -n flux-bench get gitrepository,kustomization -o yaml >&2 || true
  die "the Kustomization did not become Ready; logs in $peers/logs"
fi
t1=$(date +%s.%N)
kubectl -n flux-bench get gitrepository app \
  -o jsonpath='GitRepository Ready={.status.conditions[?(@.type=="Ready")].status}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}'
kubectl -n flux-bench get kustomization app \
  -o jsonpath='Kustomization Ready={.status.conditions[?(@.type=="Ready")].status}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}'
echo "artifact: $(kubectl -n flux-bench get gitrepository app -o jsonpath='{.status.artifact.url}')"
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "Ready %.2f s after the objects were created\n", b - a }'
kubectl -n smoke-target get configmap smoke -o jsonpath='ConfigMap smoke-target/smoke: {.data.greeting}{"\n"}' ||
  die "the ConfigMap was not applied"

log "a second commit, pushed over HTTP, then a reconcile request (what 'flux reconcile source git' does)"
sed -i 's/hello from flux/hello again/' "$peers/work/deploy/configmap.yaml"
git -C "$peers/work" -c user.name=smoke -c user.email=smoke@localhost commit -qam second
git -C "$peers/work" push -q "http://$git_addr/app.git" main
t0=$(date +%s.%N)
kubectl -n flux-bench annotate --overwrite gitrepository/app reconcile.fluxcd.io/requestedAt="$t0" >/dev/null
greeting() { kubectl -n smoke-target get configmap smoke -o jsonpath='{.data.greeting}'; }
deadline=$((SECONDS + 120))
until [[ $(greeting) == "hello again" ]]; do
  ((SECONDS < deadline)) || die "the second commit was not applied within 120 s; logs in $peers/logs"
  sleep 0.1
done
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "second commit applied %.2f s after the reconcile request\n", b - a }'
kubectl -n flux-bench wait --for=condition=Ready kustomization/app --timeout=60s >/dev/null
kubectl -n flux-bench get kustomization app \
  -o jsonpath='Kustomization Ready={.status.conditions[?(@.type=="Ready")].status}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}'

log "fluxssa: 100 ConfigMaps"
kubectl create namespace fluxssa >/dev/null
for i in $(seq 1 100); do
  printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%03d\ndata:\n  key: value-%d\n' "$i" "$i"
done >"$peers/cm100.yaml"
"$pbin/fluxssa" --kubeconfig "$KUBECONFIG" --file "$peers/cm100.yaml" --namespace fluxssa
n=$(kubectl -n fluxssa get configmap -l kustomize.toolkit.fluxcd.io/name=fluxssa -o name | wc -l)
((n == 100)) || die "fluxssa: expected 100 ConfigMaps, found $n"
echo "fluxssa: $n ConfigMaps present"
"$pbin/fluxssa" --kubeconfig "$KUBECONFIG" --file "$peers/cm100.yaml" --namespace fluxssa | sed 's/$/ (again, no change)/'
log "ok"
