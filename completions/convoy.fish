# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_convoy_global_optspecs
    string join \n kubeconfig= context= n/namespace= o/output= no-color v/verbose q/quiet log-format= request-timeout= h/help V/version
end

function __fish_convoy_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_convoy_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_convoy_using_subcommand
    set -l cmd (__fish_convoy_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c convoy -n "__fish_convoy_needs_command" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_needs_command" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_needs_command" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_needs_command" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_needs_command" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_needs_command" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_needs_command" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_needs_command" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_needs_command" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_needs_command" -s V -l version -d 'Print version'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "render" -d 'Render a Release: print its objects in apply order and its renderRef'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "diff" -d 'Show what a sync would change: a diff per object, drift named by field manager'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "sync" -d 'Sync a Release now: render, dry-run, apply in waves, prune, record, write the status'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "status" -d 'Explain a Release: who wrote each condition and why, what was attempted and what runs'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "health" -d 'Show the health of each object and hook of a Release'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "get" -d 'List Releases (or show one) with State, Applied, InSync, Healthy, the render and Age'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "pin" -d 'Pin a Release to a stored render (a full renderRef or a unique prefix of one)'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "unpin" -d 'Clear a Release\'s pin: it runs its source\'s render again'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "history" -d 'List a Release\'s render history, oldest first and numbered (`convoy pin NAME N` runs entry N), with each render\'s outcome and what runs, what is pinned and the last healthy render marked'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "install" -d 'Install convoy: CRDs, RBAC, the default health rules and the daemon\'s Deployments'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "check" -d 'Check the cluster: reachable, convoy\'s CRDs and their versions, the daemon\'s RBAC, the daemon running and reconciling, and the render store. Exit 0 when nothing failed'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "daemon" -d 'Run convoy in a cluster: the Release controller and the observer\'s drift and health loops'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "completions" -d 'Print shell completions'
complete -c convoy -n "__fish_convoy_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c convoy -n "__fish_convoy_using_subcommand render" -s f -l filename -d 'Read the Release, its source objects and value layers from these files instead of the cluster' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand render" -l source-dir -d 'Use this local directory as the source\'s root (spec.source.path applies inside it)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand render" -l cache-dir -d 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand render" -l default-service-account -d 'Impersonate this ServiceAccount of each Release\'s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)' -r
complete -c convoy -n "__fish_convoy_using_subcommand render" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand render" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand render" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand render" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand render" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand render" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand render" -l ref-only -d 'Print only the renderRef'
complete -c convoy -n "__fish_convoy_using_subcommand render" -l allow-cross-namespace-refs -d 'Let a Release target, mutate into or render objects for namespaces other than its own'
complete -c convoy -n "__fish_convoy_using_subcommand render" -l insecure-kubeconfig-exec -d 'Let a Cluster\'s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
complete -c convoy -n "__fish_convoy_using_subcommand render" -l insecure-kubeconfig-tls -d 'Let a Cluster\'s kubeconfig turn off TLS verification'
complete -c convoy -n "__fish_convoy_using_subcommand render" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand render" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand render" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand render" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s f -l filename -d 'Read the Release, its sources and value layers from these files' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l source-dir -d 'Use this local directory as the source\'s root' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l concurrency -d 'Dry runs in flight' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s U -l unified -d 'Lines of context around each change (like diff -U)' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l cache-dir -d 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l render-store -d 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l default-service-account -d 'Impersonate this ServiceAccount of each Release\'s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l allow-cross-namespace-refs -d 'Let a Release target, mutate into or render objects for namespaces other than its own'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l insecure-kubeconfig-exec -d 'Let a Cluster\'s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l insecure-kubeconfig-tls -d 'Let a Cluster\'s kubeconfig turn off TLS verification'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand diff" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l timeout -d 'How long --wait waits, and how long a sync waits for its hooks and (with a healthAssessment) health' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l concurrency -d 'Requests in flight per apply step' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l cache-dir -d 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l render-store -d 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l default-service-account -d 'Impersonate this ServiceAccount of each Release\'s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l force -d 'A forced sync: skip the server-side dry-run gate'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -s y -l yes -d 'Do not ask for confirmation of --force'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l request -d 'Only write the /sync request for the daemon; do not reconcile here'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l wait -d 'With --request: wait until the daemon handled the request'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l allow-cross-namespace-refs -d 'Let a Release target, mutate into or render objects for namespaces other than its own'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l insecure-kubeconfig-exec -d 'Let a Cluster\'s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l insecure-kubeconfig-tls -d 'Let a Cluster\'s kubeconfig turn off TLS verification'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand sync" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand status" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand status" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand status" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand status" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand status" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand status" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand status" -s w -l watch -d 'After explaining, explain again whenever the Release changes (Ctrl-C ends)'
complete -c convoy -n "__fish_convoy_using_subcommand status" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand status" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand status" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand health" -l default-service-account -d 'Impersonate this ServiceAccount of each Release\'s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)' -r
complete -c convoy -n "__fish_convoy_using_subcommand health" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand health" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand health" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand health" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand health" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand health" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand health" -l watch -d 'Redraw on every change until the render last attempted is applied and every object is Healthy for it (exit 0), or it failed or was rolled back (exit 1), or Ctrl-C'
complete -c convoy -n "__fish_convoy_using_subcommand health" -l live -d 'Assess now with the same rules as the health loop, writing nothing'
complete -c convoy -n "__fish_convoy_using_subcommand health" -l allow-cross-namespace-refs -d 'Let a Release target, mutate into or render objects for namespaces other than its own'
complete -c convoy -n "__fish_convoy_using_subcommand health" -l insecure-kubeconfig-exec -d 'Let a Cluster\'s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
complete -c convoy -n "__fish_convoy_using_subcommand health" -l insecure-kubeconfig-tls -d 'Let a Cluster\'s kubeconfig turn off TLS verification'
complete -c convoy -n "__fish_convoy_using_subcommand health" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand health" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand health" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand health" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand get" -s l -l selector -d 'Only Releases whose labels match this selector (`team=payments,tier!=db`)' -r
complete -c convoy -n "__fish_convoy_using_subcommand get" -l sort-by -d 'Sort by a field of the object, as a JSONPath (`.metadata.creationTimestamp`, `{.status.conditions[0].status}` is not supported: dotted fields only)' -r
complete -c convoy -n "__fish_convoy_using_subcommand get" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand get" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand get" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand get" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand get" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand get" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand get" -s A -l all-namespaces -d 'List Releases in every namespace'
complete -c convoy -n "__fish_convoy_using_subcommand get" -s w -l watch -d 'After listing, print each Release again when it changes (Ctrl-C ends)'
complete -c convoy -n "__fish_convoy_using_subcommand get" -l show-managed-fields -d 'Keep `metadata.managedFields` in `-o yaml|json`'
complete -c convoy -n "__fish_convoy_using_subcommand get" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand get" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand get" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand get" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand pin" -l render-store -d 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none' -r
complete -c convoy -n "__fish_convoy_using_subcommand pin" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand pin" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand pin" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand pin" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand pin" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand pin" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand pin" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand pin" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand pin" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand pin" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand unpin" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand history" -l render-store -d 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none' -r
complete -c convoy -n "__fish_convoy_using_subcommand history" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand history" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand history" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand history" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand history" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand history" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand history" -s w -l watch -d 'After listing, list again whenever the Release changes (a new render, a rollout\'s end; Ctrl-C ends)'
complete -c convoy -n "__fish_convoy_using_subcommand history" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand history" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand history" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand install" -l image -d 'Image of the daemon' -r
complete -c convoy -n "__fish_convoy_using_subcommand install" -l tenant -d 'Only set up namespace NS for a locked-down daemon: the convoy-deployer ServiceAccount, bound to the built-in admin role in NS' -r
complete -c convoy -n "__fish_convoy_using_subcommand install" -l timeout -d 'How long to wait for the CRDs to become Established (and, with --wait, for the Deployments to become Available)' -r
complete -c convoy -n "__fish_convoy_using_subcommand install" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand install" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand install" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand install" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand install" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand install" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand install" -l crds-only -d 'Install only the CRDs (enough for `convoy sync` from a laptop)'
complete -c convoy -n "__fish_convoy_using_subcommand install" -l dry-run -d 'Print what would be installed instead of applying it'
complete -c convoy -n "__fish_convoy_using_subcommand install" -l cluster-admin -d 'Give the daemon write access to every kind in every namespace and let Releases without a ServiceAccount act as convoy (anyone who can write a Release or its source then controls the cluster)'
complete -c convoy -n "__fish_convoy_using_subcommand install" -l wait -d 'After applying, wait until the daemon\'s Deployments are Available, then say what to do next'
complete -c convoy -n "__fish_convoy_using_subcommand install" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand install" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand install" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand install" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand check" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand check" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand check" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand check" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand check" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand check" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand check" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand check" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand check" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l role -d 'Which loops to run' -r -f -a "controller\t'The Release controller and the Cluster and source controllers'
observer\t'The drift loop and the health loop'
all\t'Everything in one process'"
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l shards -d 'Number of shards to split Clusters into (0: no sharding, this replica does everything)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l lease-namespace -d 'Namespace of the shard Leases' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l identity -d 'This replica\'s identity in the Leases (default: hostname and pid)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l lease-duration -d 'How long a Lease lasts without renewal' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l listen -d 'Address of /healthz, /readyz and /metrics' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l workers -d 'Workers per loop' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l concurrency -d 'Requests in flight per apply, dry run and prune' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l cache-dir -d 'Where fetched sources are cached' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l watch-namespace -d 'Watch only these namespaces (comma-separated or repeated; default: all)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l render-store -d 'Where renders and history are kept: kubernetes (Secrets in the Lease namespace), kubernetes:NAMESPACE, dir:PATH, or none (no pins, rollbacks or history)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l resync -d 'How often every Release is looked at again even without events' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l fetch-timeout -d 'The deadline of one source fetch (git, a chart repository, an OCI registry)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l render-timeout -d 'The deadline of one render (helm template, kustomize build); the tool is killed past it' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l shutdown-grace -d 'How long SIGTERM waits for the passes in flight before it cancels them (keep it under the Pod\'s terminationGracePeriodSeconds)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l default-service-account -d 'Impersonate this ServiceAccount of each Release\'s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l allow-file-urls -d 'Let GitRepositories name file:// URLs (local paths on the daemon\'s machine; never convoy\'s own cache)'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l allow-cross-namespace-refs -d 'Let a Release target, mutate into or render objects for namespaces other than its own'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l insecure-kubeconfig-exec -d 'Let a Cluster\'s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l insecure-kubeconfig-tls -d 'Let a Cluster\'s kubeconfig turn off TLS verification'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand daemon" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand completions" -l kubeconfig -d 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)' -r -F
complete -c convoy -n "__fish_convoy_using_subcommand completions" -l context -d 'The kubeconfig context to use' -r
complete -c convoy -n "__fish_convoy_using_subcommand completions" -s n -l namespace -d 'Namespace of the Release (default: the context\'s namespace)' -r
complete -c convoy -n "__fish_convoy_using_subcommand completions" -s o -l output -d 'Output format' -r -f -a "table\t''
yaml\t''
json\t''
diff\t'Only for `convoy diff`'
wide\t'`convoy get`: more columns (the source revision, the Applied message)'
name\t'`convoy get`: `release.core.convoy.kumodo.io/NAME` per line'"
complete -c convoy -n "__fish_convoy_using_subcommand completions" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c convoy -n "__fish_convoy_using_subcommand completions" -l request-timeout -d 'How long one API request may wait for the server\'s answer (watches excepted)' -r
complete -c convoy -n "__fish_convoy_using_subcommand completions" -l no-color -d 'Never color the output (color is only used on a terminal anyway)'
complete -c convoy -n "__fish_convoy_using_subcommand completions" -s v -l verbose -d 'More logs on stderr (-v info, -vv debug, -vvv trace)'
complete -c convoy -n "__fish_convoy_using_subcommand completions" -s q -l quiet -d 'Only errors on stderr'
complete -c convoy -n "__fish_convoy_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "render" -d 'Render a Release: print its objects in apply order and its renderRef'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "diff" -d 'Show what a sync would change: a diff per object, drift named by field manager'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "sync" -d 'Sync a Release now: render, dry-run, apply in waves, prune, record, write the status'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "status" -d 'Explain a Release: who wrote each condition and why, what was attempted and what runs'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "health" -d 'Show the health of each object and hook of a Release'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "get" -d 'List Releases (or show one) with State, Applied, InSync, Healthy, the render and Age'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "pin" -d 'Pin a Release to a stored render (a full renderRef or a unique prefix of one)'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "unpin" -d 'Clear a Release\'s pin: it runs its source\'s render again'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "history" -d 'List a Release\'s render history, oldest first and numbered (`convoy pin NAME N` runs entry N), with each render\'s outcome and what runs, what is pinned and the last healthy render marked'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "install" -d 'Install convoy: CRDs, RBAC, the default health rules and the daemon\'s Deployments'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "check" -d 'Check the cluster: reachable, convoy\'s CRDs and their versions, the daemon\'s RBAC, the daemon running and reconciling, and the render store. Exit 0 when nothing failed'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "daemon" -d 'Run convoy in a cluster: the Release controller and the observer\'s drift and health loops'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "completions" -d 'Print shell completions'
complete -c convoy -n "__fish_convoy_using_subcommand help; and not __fish_seen_subcommand_from render diff sync status health get pin unpin history install check daemon completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
