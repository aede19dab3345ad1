
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'convoy' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'convoy'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'convoy' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('render', 'render', [CompletionResultType]::ParameterValue, 'Render a Release: print its objects in apply order and its renderRef')
            [CompletionResult]::new('diff', 'diff', [CompletionResultType]::ParameterValue, 'Show what a sync would change: a diff per object, drift named by field manager')
            [CompletionResult]::new('sync', 'sync', [CompletionResultType]::ParameterValue, 'Sync a Release now: render, dry-run, apply in waves, prune, record, write the status')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Explain a Release: who wrote each condition and why, what was attempted and what runs')
            [CompletionResult]::new('health', 'health', [CompletionResultType]::ParameterValue, 'Show the health of each object and hook of a Release')
            [CompletionResult]::new('get', 'get', [CompletionResultType]::ParameterValue, 'List Releases (or show one) with State, Applied, InSync, Healthy, the render and Age')
            [CompletionResult]::new('pin', 'pin', [CompletionResultType]::ParameterValue, 'Pin a Release to a stored render (a full renderRef or a unique prefix of one)')
            [CompletionResult]::new('unpin', 'unpin', [CompletionResultType]::ParameterValue, 'Clear a Release''s pin: it runs its source''s render again')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'List a Release''s render history, oldest first and numbered (`convoy pin NAME N` runs entry N), with each render''s outcome and what runs, what is pinned and the last healthy render marked')
            [CompletionResult]::new('install', 'install', [CompletionResultType]::ParameterValue, 'Install convoy: CRDs, RBAC, the default health rules and the daemon''s Deployments')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Check the cluster: reachable, convoy''s CRDs and their versions, the daemon''s RBAC, the daemon running and reconciling, and the render store. Exit 0 when nothing failed')
            [CompletionResult]::new('daemon', 'daemon', [CompletionResultType]::ParameterValue, 'Run convoy in a cluster: the Release controller and the observer''s drift and health loops')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print shell completions')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'convoy;render' {
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Read the Release, its source objects and value layers from these files instead of the cluster')
            [CompletionResult]::new('--filename', '--filename', [CompletionResultType]::ParameterName, 'Read the Release, its source objects and value layers from these files instead of the cluster')
            [CompletionResult]::new('--source-dir', '--source-dir', [CompletionResultType]::ParameterName, 'Use this local directory as the source''s root (spec.source.path applies inside it)')
            [CompletionResult]::new('--cache-dir', '--cache-dir', [CompletionResultType]::ParameterName, 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)')
            [CompletionResult]::new('--default-service-account', '--default-service-account', [CompletionResultType]::ParameterName, 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--ref-only', '--ref-only', [CompletionResultType]::ParameterName, 'Print only the renderRef')
            [CompletionResult]::new('--allow-cross-namespace-refs', '--allow-cross-namespace-refs', [CompletionResultType]::ParameterName, 'Let a Release target, mutate into or render objects for namespaces other than its own')
            [CompletionResult]::new('--insecure-kubeconfig-exec', '--insecure-kubeconfig-exec', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)')
            [CompletionResult]::new('--insecure-kubeconfig-tls', '--insecure-kubeconfig-tls', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig turn off TLS verification')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;diff' {
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Read the Release, its sources and value layers from these files')
            [CompletionResult]::new('--filename', '--filename', [CompletionResultType]::ParameterName, 'Read the Release, its sources and value layers from these files')
            [CompletionResult]::new('--source-dir', '--source-dir', [CompletionResultType]::ParameterName, 'Use this local directory as the source''s root')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Dry runs in flight')
            [CompletionResult]::new('-U', '-U ', [CompletionResultType]::ParameterName, 'Lines of context around each change (like diff -U)')
            [CompletionResult]::new('--unified', '--unified', [CompletionResultType]::ParameterName, 'Lines of context around each change (like diff -U)')
            [CompletionResult]::new('--cache-dir', '--cache-dir', [CompletionResultType]::ParameterName, 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)')
            [CompletionResult]::new('--render-store', '--render-store', [CompletionResultType]::ParameterName, 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none')
            [CompletionResult]::new('--default-service-account', '--default-service-account', [CompletionResultType]::ParameterName, 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--allow-cross-namespace-refs', '--allow-cross-namespace-refs', [CompletionResultType]::ParameterName, 'Let a Release target, mutate into or render objects for namespaces other than its own')
            [CompletionResult]::new('--insecure-kubeconfig-exec', '--insecure-kubeconfig-exec', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)')
            [CompletionResult]::new('--insecure-kubeconfig-tls', '--insecure-kubeconfig-tls', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig turn off TLS verification')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;sync' {
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'How long --wait waits, and how long a sync waits for its hooks and (with a healthAssessment) health')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Requests in flight per apply step')
            [CompletionResult]::new('--cache-dir', '--cache-dir', [CompletionResultType]::ParameterName, 'Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy)')
            [CompletionResult]::new('--render-store', '--render-store', [CompletionResultType]::ParameterName, 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none')
            [CompletionResult]::new('--default-service-account', '--default-service-account', [CompletionResultType]::ParameterName, 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'A forced sync: skip the server-side dry-run gate')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation of --force')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation of --force')
            [CompletionResult]::new('--request', '--request', [CompletionResultType]::ParameterName, 'Only write the /sync request for the daemon; do not reconcile here')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'With --request: wait until the daemon handled the request')
            [CompletionResult]::new('--allow-cross-namespace-refs', '--allow-cross-namespace-refs', [CompletionResultType]::ParameterName, 'Let a Release target, mutate into or render objects for namespaces other than its own')
            [CompletionResult]::new('--insecure-kubeconfig-exec', '--insecure-kubeconfig-exec', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)')
            [CompletionResult]::new('--insecure-kubeconfig-tls', '--insecure-kubeconfig-tls', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig turn off TLS verification')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;status' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'After explaining, explain again whenever the Release changes (Ctrl-C ends)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'After explaining, explain again whenever the Release changes (Ctrl-C ends)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;health' {
            [CompletionResult]::new('--default-service-account', '--default-service-account', [CompletionResultType]::ParameterName, 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'Redraw on every change until the render last attempted is applied and every object is Healthy for it (exit 0), or it failed or was rolled back (exit 1), or Ctrl-C')
            [CompletionResult]::new('--live', '--live', [CompletionResultType]::ParameterName, 'Assess now with the same rules as the health loop, writing nothing')
            [CompletionResult]::new('--allow-cross-namespace-refs', '--allow-cross-namespace-refs', [CompletionResultType]::ParameterName, 'Let a Release target, mutate into or render objects for namespaces other than its own')
            [CompletionResult]::new('--insecure-kubeconfig-exec', '--insecure-kubeconfig-exec', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)')
            [CompletionResult]::new('--insecure-kubeconfig-tls', '--insecure-kubeconfig-tls', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig turn off TLS verification')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;get' {
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Only Releases whose labels match this selector (`team=payments,tier!=db`)')
            [CompletionResult]::new('--selector', '--selector', [CompletionResultType]::ParameterName, 'Only Releases whose labels match this selector (`team=payments,tier!=db`)')
            [CompletionResult]::new('--sort-by', '--sort-by', [CompletionResultType]::ParameterName, 'Sort by a field of the object, as a JSONPath (`.metadata.creationTimestamp`, `{.status.conditions[0].status}` is not supported: dotted fields only)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('-A', '-A ', [CompletionResultType]::ParameterName, 'List Releases in every namespace')
            [CompletionResult]::new('--all-namespaces', '--all-namespaces', [CompletionResultType]::ParameterName, 'List Releases in every namespace')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'After listing, print each Release again when it changes (Ctrl-C ends)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'After listing, print each Release again when it changes (Ctrl-C ends)')
            [CompletionResult]::new('--show-managed-fields', '--show-managed-fields', [CompletionResultType]::ParameterName, 'Keep `metadata.managedFields` in `-o yaml|json`')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;pin' {
            [CompletionResult]::new('--render-store', '--render-store', [CompletionResultType]::ParameterName, 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;unpin' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;history' {
            [CompletionResult]::new('--render-store', '--render-store', [CompletionResultType]::ParameterName, 'Where renders and history are kept: kubernetes (Secrets in convoy-system, as the daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'After listing, list again whenever the Release changes (a new render, a rollout''s end; Ctrl-C ends)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'After listing, list again whenever the Release changes (a new render, a rollout''s end; Ctrl-C ends)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;install' {
            [CompletionResult]::new('--image', '--image', [CompletionResultType]::ParameterName, 'Image of the daemon')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Only set up namespace NS for a locked-down daemon: the convoy-deployer ServiceAccount, bound to the built-in admin role in NS')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'How long to wait for the CRDs to become Established (and, with --wait, for the Deployments to become Available)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--crds-only', '--crds-only', [CompletionResultType]::ParameterName, 'Install only the CRDs (enough for `convoy sync` from a laptop)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print what would be installed instead of applying it')
            [CompletionResult]::new('--cluster-admin', '--cluster-admin', [CompletionResultType]::ParameterName, 'Give the daemon write access to every kind in every namespace and let Releases without a ServiceAccount act as convoy (anyone who can write a Release or its source then controls the cluster)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'After applying, wait until the daemon''s Deployments are Available, then say what to do next')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;check' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;daemon' {
            [CompletionResult]::new('--role', '--role', [CompletionResultType]::ParameterName, 'Which loops to run')
            [CompletionResult]::new('--shards', '--shards', [CompletionResultType]::ParameterName, 'Number of shards to split Clusters into (0: no sharding, this replica does everything)')
            [CompletionResult]::new('--lease-namespace', '--lease-namespace', [CompletionResultType]::ParameterName, 'Namespace of the shard Leases')
            [CompletionResult]::new('--identity', '--identity', [CompletionResultType]::ParameterName, 'This replica''s identity in the Leases (default: hostname and pid)')
            [CompletionResult]::new('--lease-duration', '--lease-duration', [CompletionResultType]::ParameterName, 'How long a Lease lasts without renewal')
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'Address of /healthz, /readyz and /metrics')
            [CompletionResult]::new('--workers', '--workers', [CompletionResultType]::ParameterName, 'Workers per loop')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Requests in flight per apply, dry run and prune')
            [CompletionResult]::new('--cache-dir', '--cache-dir', [CompletionResultType]::ParameterName, 'Where fetched sources are cached')
            [CompletionResult]::new('--watch-namespace', '--watch-namespace', [CompletionResultType]::ParameterName, 'Watch only these namespaces (comma-separated or repeated; default: all)')
            [CompletionResult]::new('--render-store', '--render-store', [CompletionResultType]::ParameterName, 'Where renders and history are kept: kubernetes (Secrets in the Lease namespace), kubernetes:NAMESPACE, dir:PATH, or none (no pins, rollbacks or history)')
            [CompletionResult]::new('--resync', '--resync', [CompletionResultType]::ParameterName, 'How often every Release is looked at again even without events')
            [CompletionResult]::new('--fetch-timeout', '--fetch-timeout', [CompletionResultType]::ParameterName, 'The deadline of one source fetch (git, a chart repository, an OCI registry)')
            [CompletionResult]::new('--render-timeout', '--render-timeout', [CompletionResultType]::ParameterName, 'The deadline of one render (helm template, kustomize build); the tool is killed past it')
            [CompletionResult]::new('--shutdown-grace', '--shutdown-grace', [CompletionResultType]::ParameterName, 'How long SIGTERM waits for the passes in flight before it cancels them (keep it under the Pod''s terminationGracePeriodSeconds)')
            [CompletionResult]::new('--default-service-account', '--default-service-account', [CompletionResultType]::ParameterName, 'Impersonate this ServiceAccount of each Release''s namespace for Releases that name no spec.serviceAccountName (Releases never act as convoy itself then)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--allow-file-urls', '--allow-file-urls', [CompletionResultType]::ParameterName, 'Let GitRepositories name file:// URLs (local paths on the daemon''s machine; never convoy''s own cache)')
            [CompletionResult]::new('--allow-cross-namespace-refs', '--allow-cross-namespace-refs', [CompletionResultType]::ParameterName, 'Let a Release target, mutate into or render objects for namespaces other than its own')
            [CompletionResult]::new('--insecure-kubeconfig-exec', '--insecure-kubeconfig-exec', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig run exec credential and auth-provider plugins (they run commands as convoy)')
            [CompletionResult]::new('--insecure-kubeconfig-tls', '--insecure-kubeconfig-tls', [CompletionResultType]::ParameterName, 'Let a Cluster''s kubeconfig turn off TLS verification')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;completions' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'The kubeconfig context to use')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Release (default: the context''s namespace)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on stderr')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'How long one API request may wait for the server''s answer (watches excepted)')
            [CompletionResult]::new('--no-color', '--no-color', [CompletionResultType]::ParameterName, 'Never color the output (color is only used on a terminal anyway)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More logs on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'convoy;help' {
            [CompletionResult]::new('render', 'render', [CompletionResultType]::ParameterValue, 'Render a Release: print its objects in apply order and its renderRef')
            [CompletionResult]::new('diff', 'diff', [CompletionResultType]::ParameterValue, 'Show what a sync would change: a diff per object, drift named by field manager')
            [CompletionResult]::new('sync', 'sync', [CompletionResultType]::ParameterValue, 'Sync a Release now: render, dry-run, apply in waves, prune, record, write the status')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Explain a Release: who wrote each condition and why, what was attempted and what runs')
            [CompletionResult]::new('health', 'health', [CompletionResultType]::ParameterValue, 'Show the health of each object and hook of a Release')
            [CompletionResult]::new('get', 'get', [CompletionResultType]::ParameterValue, 'List Releases (or show one) with State, Applied, InSync, Healthy, the render and Age')
            [CompletionResult]::new('pin', 'pin', [CompletionResultType]::ParameterValue, 'Pin a Release to a stored render (a full renderRef or a unique prefix of one)')
            [CompletionResult]::new('unpin', 'unpin', [CompletionResultType]::ParameterValue, 'Clear a Release''s pin: it runs its source''s render again')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'List a Release''s render history, oldest first and numbered (`convoy pin NAME N` runs entry N), with each render''s outcome and what runs, what is pinned and the last healthy render marked')
            [CompletionResult]::new('install', 'install', [CompletionResultType]::ParameterValue, 'Install convoy: CRDs, RBAC, the default health rules and the daemon''s Deployments')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Check the cluster: reachable, convoy''s CRDs and their versions, the daemon''s RBAC, the daemon running and reconciling, and the render store. Exit 0 when nothing failed')
            [CompletionResult]::new('daemon', 'daemon', [CompletionResultType]::ParameterValue, 'Run convoy in a cluster: the Release controller and the observer''s drift and health loops')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print shell completions')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'convoy;help;render' {
            break
        }
        'convoy;help;diff' {
            break
        }
        'convoy;help;sync' {
            break
        }
        'convoy;help;status' {
            break
        }
        'convoy;help;health' {
            break
        }
        'convoy;help;get' {
            break
        }
        'convoy;help;pin' {
            break
        }
        'convoy;help;unpin' {
            break
        }
        'convoy;help;history' {
            break
        }
        'convoy;help;install' {
            break
        }
        'convoy;help;check' {
            break
        }
        'convoy;help;daemon' {
            break
        }
        'convoy;help;completions' {
            break
        }
        'convoy;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
