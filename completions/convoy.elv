
use builtin;
use str;

set edit:completion:arg-completer[convoy] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'convoy'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'convoy'= {
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand render 'Render a Release: print its objects in apply order and its renderRef'
            cand diff 'Show what a sync would change: a diff per object, drift named by field manager'
            cand sync 'Sync a Release now: render, dry-run, apply in waves, prune, record, write the status'
            cand status 'Explain a Release: who wrote each condition and why, what was attempted and what runs'
            cand health 'Show the health of each object and hook of a Release'
            cand get 'List Releases with State, Applied, InSync, Healthy and Age'
            cand pin 'Pin a Release to a stored render (a full renderRef or a unique prefix of one)'
            cand unpin 'Clear a Release''s pin: it runs its source''s render again'
            cand history 'List a Release''s render history, oldest first, with what runs, what is pinned and the last healthy render marked'
            cand install 'Install convoy: CRDs, RBAC, the default health rules and the daemon''s Deployments'
            cand daemon 'Run convoy in a cluster: the Release controller and the observer''s drift and health loops'
            cand completions 'Print shell completions'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'convoy;render'= {
            cand -f 'Read the Release, its source objects and value layers from these files instead of the cluster'
            cand --filename 'Read the Release, its source objects and value layers from these files instead of the cluster'
            cand --source-dir 'Use this local directory as the source''s root (spec.source.path applies inside it)'
            cand --cache-dir 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)'
            cand --default-service-account 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --ref-only 'Print only the renderRef'
            cand --allow-cross-namespace-refs 'Let a Release target, mutate into or render objects for namespaces other than its own'
            cand --insecure-kubeconfig-exec 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
            cand --insecure-kubeconfig-tls 'Let a Cluster''s kubeconfig turn off TLS verification'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;diff'= {
            cand -f 'Read the Release, its sources and value layers from these files'
            cand --filename 'Read the Release, its sources and value layers from these files'
            cand --source-dir 'Use this local directory as the source''s root'
            cand --concurrency 'Dry runs in flight'
            cand -U 'Lines of context around each change (like diff -U)'
            cand --unified 'Lines of context around each change (like diff -U)'
            cand --cache-dir 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)'
            cand --render-store 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none'
            cand --default-service-account 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --allow-cross-namespace-refs 'Let a Release target, mutate into or render objects for namespaces other than its own'
            cand --insecure-kubeconfig-exec 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
            cand --insecure-kubeconfig-tls 'Let a Cluster''s kubeconfig turn off TLS verification'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;sync'= {
            cand --timeout 'How long --wait waits, and how long a sync waits for its hooks and (with a healthAssessment) health'
            cand --concurrency 'Requests in flight per apply step'
            cand --cache-dir 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)'
            cand --render-store 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none'
            cand --default-service-account 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --force 'A forced sync: skip the server-side dry-run gate'
            cand -y 'Do not ask for confirmation of --force'
            cand --yes 'Do not ask for confirmation of --force'
            cand --request 'Only write the /sync request for the daemon; do not reconcile here'
            cand --wait 'With --request: wait until the daemon handled the request'
            cand --allow-cross-namespace-refs 'Let a Release target, mutate into or render objects for namespaces other than its own'
            cand --insecure-kubeconfig-exec 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
            cand --insecure-kubeconfig-tls 'Let a Cluster''s kubeconfig turn off TLS verification'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;status'= {
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;health'= {
            cand --default-service-account 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --watch 'Redraw on every change until every object is Healthy (or Ctrl-C)'
            cand --live 'Assess now with the same rules as the health loop, writing nothing'
            cand --allow-cross-namespace-refs 'Let a Release target, mutate into or render objects for namespaces other than its own'
            cand --insecure-kubeconfig-exec 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
            cand --insecure-kubeconfig-tls 'Let a Cluster''s kubeconfig turn off TLS verification'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;get'= {
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand -A 'List Releases in every namespace'
            cand --all-namespaces 'List Releases in every namespace'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;pin'= {
            cand --render-store 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;unpin'= {
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;history'= {
            cand --render-store 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;install'= {
            cand --image 'Image of the daemon'
            cand --tenant 'Only set up namespace NS for a locked-down daemon: the convoy-deployer ServiceAccount, bound to the built-in admin role in NS'
            cand --timeout 'How long to wait for the CRDs to become Established'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --crds-only 'Install only the CRDs (enough for `convoy sync` from a laptop)'
            cand --dry-run 'Print what would be installed instead of applying it'
            cand --cluster-admin 'Give the daemon write access to every kind in every namespace and let Releases without a ServiceAccount act as convoy (anyone who can write a Release or its source then controls the cluster)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;daemon'= {
            cand --role 'Which loops to run'
            cand --shards 'Number of shards to split Clusters into (0: no sharding, this replica does everything)'
            cand --lease-namespace 'Namespace of the shard Leases'
            cand --identity 'This replica''s identity in the Leases (default: hostname and pid)'
            cand --lease-duration 'How long a Lease lasts without renewal'
            cand --listen 'Address of /healthz, /readyz and /metrics'
            cand --workers 'Workers per loop'
            cand --concurrency 'Requests in flight per apply, dry run and prune'
            cand --cache-dir 'Where fetched sources are cached'
            cand --watch-namespace 'Watch only these namespaces (comma-separated or repeated; default: all)'
            cand --render-store 'Where renders and history are kept: kubernetes (Secrets in the Lease namespace), kubernetes:NAMESPACE, dir:PATH, or none (no pins, rollbacks or history)'
            cand --resync 'How often every Release is looked at again even without events'
            cand --fetch-timeout 'The deadline of one source fetch (git, a chart repository, an OCI registry)'
            cand --render-timeout 'The deadline of one render (helm template, kustomize build); the tool is killed past it'
            cand --shutdown-grace 'How long SIGTERM waits for the passes in flight before it cancels them (keep it under the Pod''s terminationGracePeriodSeconds)'
            cand --default-service-account 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)'
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --allow-file-urls 'Let GitRepositories name file:// URLs (local paths on the daemon''s machine; never convoy''s own cache)'
            cand --allow-cross-namespace-refs 'Let a Release target, mutate into or render objects for namespaces other than its own'
            cand --insecure-kubeconfig-exec 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
            cand --insecure-kubeconfig-tls 'Let a Cluster''s kubeconfig turn off TLS verification'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;completions'= {
            cand --kubeconfig 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)'
            cand --context 'The kubeconfig context to use'
            cand -n 'Namespace of the Release (default: the context''s namespace)'
            cand --namespace 'Namespace of the Release (default: the context''s namespace)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --log-format 'Log format on stderr'
            cand --request-timeout 'How long one API request may wait for the server''s answer (watches excepted)'
            cand --no-color 'Never color the output (color is only used on a terminal anyway)'
            cand -v 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More logs on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'convoy;help'= {
            cand render 'Render a Release: print its objects in apply order and its renderRef'
            cand diff 'Show what a sync would change: a diff per object, drift named by field manager'
            cand sync 'Sync a Release now: render, dry-run, apply in waves, prune, record, write the status'
            cand status 'Explain a Release: who wrote each condition and why, what was attempted and what runs'
            cand health 'Show the health of each object and hook of a Release'
            cand get 'List Releases with State, Applied, InSync, Healthy and Age'
            cand pin 'Pin a Release to a stored render (a full renderRef or a unique prefix of one)'
            cand unpin 'Clear a Release''s pin: it runs its source''s render again'
            cand history 'List a Release''s render history, oldest first, with what runs, what is pinned and the last healthy render marked'
            cand install 'Install convoy: CRDs, RBAC, the default health rules and the daemon''s Deployments'
            cand daemon 'Run convoy in a cluster: the Release controller and the observer''s drift and health loops'
            cand completions 'Print shell completions'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'convoy;help;render'= {
        }
        &'convoy;help;diff'= {
        }
        &'convoy;help;sync'= {
        }
        &'convoy;help;status'= {
        }
        &'convoy;help;health'= {
        }
        &'convoy;help;get'= {
        }
        &'convoy;help;pin'= {
        }
        &'convoy;help;unpin'= {
        }
        &'convoy;help;history'= {
        }
        &'convoy;help;install'= {
        }
        &'convoy;help;daemon'= {
        }
        &'convoy;help;completions'= {
        }
        &'convoy;help;help'= {
        }
    ]
    $completions[$command]
}
