#!/usr/bin/env bash
# README's "Getting started on a cluster", end to end on the test control plane: install,
# a first Release from a Git repository, a change, a drift put back, and a rollback.
# Run from the repository root: examples/getting-started/walkthrough.sh
set -euo pipefail
root=$(pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; scripts/testenv down --dir "$work/plane" >/dev/null 2>&1 || true' EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "a control plane (any cluster will do; this one is the tests')"
scripts/testenv build >/dev/null
eval "$(scripts/testenv up --dir "$work/plane")"
export PATH="$(scripts/testenv bin):$PATH"
cargo build --release --quiet
export PATH="$root/target/release:${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/release:}$PATH"

step "install convoy, and let Releases of namespace demo deploy there"
convoy install --wait --timeout 3m
convoy install --tenant demo
# The Deployments convoy install made run the image; on this control plane (no kubelet) the
# daemon runs here instead, with the same flags.
convoy daemon --listen 127.0.0.1:0 --allow-file-urls --cache-dir "$work/cache" 2>"$work/daemon.log" &
convoy check || true   # the reconciles line is a warning until the first Release

step "a Git repository with the waves example"
git init --quiet --bare "$work/repo.git"
git clone --quiet "$work/repo.git" "$work/checkout" 2>/dev/null
cp -r examples/waves/app "$work/checkout/app"
git -C "$work/checkout" add -A
git -C "$work/checkout" -c user.name=demo -c user.email=demo@example.com commit --quiet -m "first"
git -C "$work/checkout" push --quiet origin HEAD:main

step "the Release"
sed "s|REPO|file://$work/repo.git|" examples/getting-started/release.yaml | kubectl apply -f -
until convoy get web -n demo -o json | grep -q '"reason": "Healthy"'; do sleep 2; done
convoy get -n demo -o wide

step "a change: three replicas"
sed -i 's/replicas: 2/replicas: 3/' "$work/checkout/app/deployment.yaml"
git -C "$work/checkout" -c user.name=demo -c user.email=demo@example.com commit --quiet -am "three"
git -C "$work/checkout" push --quiet origin HEAD:main
until [ "$(kubectl -n demo get deployment web -o jsonpath='{.spec.replicas}')" = 3 ]; do sleep 2; done
convoy history web -n demo

step "a drift: someone scales by hand; convoy diff names them, the daemon puts it back"
kubectl -n demo scale deployment web --replicas=1
convoy diff web -n demo || true
until [ "$(kubectl -n demo get deployment web -o jsonpath='{.spec.replicas}')" = 3 ]; do sleep 2; done
kubectl -n demo get events --field-selector involvedObject.kind=Release -o custom-columns=REASON:.reason,MESSAGE:.message

step "a rollback: a render whose Deployment never becomes ready"
sed -i 's/^    spec:$/    spec:\n      nodeSelector: {disk: nowhere}/' "$work/checkout/app/deployment.yaml"
git -C "$work/checkout" -c user.name=demo -c user.email=demo@example.com commit --quiet -am "broken"
git -C "$work/checkout" push --quiet origin HEAD:main
until convoy get web -n demo | grep -q RolledBack; do sleep 3; done
convoy status web -n demo || true
convoy history web -n demo
