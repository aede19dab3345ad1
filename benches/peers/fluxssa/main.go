// fluxssa applies a multi-document YAML file to a Kubernetes API server with Flux's server-side
// apply engine (github.com/fluxcd/pkg/ssa), the way kustomize-controller applies the output of a
// Kustomization: normalize the objects, set the Kustomization owner labels, then
// ResourceManager.ApplyAllStaged with kustomize-controller's apply options (a server-side dry run
// per object to detect drift, then an apply of the objects that changed). It times only that call
// and prints one line:
//
//	fluxssa: applied N objects in X.XXX s
//
// With --wait it then waits, as `wait: true` on a Kustomization does, for every applied object
// to become ready (kstatus) and prints a second line `fluxssa: ready in X.XXX s`.
//
// With --version it prints the version of github.com/fluxcd/pkg/ssa it was built with and exits.
//
// It is built by scripts/peers (which writes its go.mod in the cache, pinning the ssa module to
// the version kustomize-controller uses); see benches/peers/README.md.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

const group = "kustomize.toolkit.fluxcd.io"

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the kubeconfig (default $KUBECONFIG)")
	file := flag.String("file", "", "multi-document YAML file with the objects to apply ('-' for stdin)")
	namespace := flag.String("namespace", "default", "namespace for namespaced objects that name none (like a Kustomization's targetNamespace, it is not forced on objects that name one)")
	fieldManager := flag.String("field-manager", "flux-bench", "server-side apply field manager")
	owner := flag.String("owner", "fluxssa", "name put in the kustomize.toolkit.fluxcd.io/name owner label")
	concurrency := flag.Int("concurrent-ssa", 4, "concurrent server-side apply requests (kustomize-controller's --concurrent-ssa default)")
	qps := flag.Float64("kube-api-qps", 50, "client QPS (Flux controllers' --kube-api-qps default)")
	burst := flag.Int("kube-api-burst", 300, "client burst (Flux controllers' --kube-api-burst default)")
	force := flag.Bool("force", false, "recreate objects whose immutable fields changed (Kustomization spec.force)")
	wait := flag.Bool("wait", false, "after applying, wait for every object to become ready (Kustomization spec.wait)")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	version := flag.Bool("version", false, "print the github.com/fluxcd/pkg/ssa version built in and exit")
	flag.Parse()
	if *version {
		fmt.Println(ssaVersion())
		return
	}
	if *file == "" {
		fail("--file is required")
	}

	var data []byte
	var err error
	if *file == "-" {
		data, err = readAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		fail("read %s: %v", *file, err)
	}
	objects, err := ssautil.ReadObjects(bytes.NewReader(data))
	if err != nil {
		fail("parse %s: %v", *file, err)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	cfg.QPS = float32(*qps)
	cfg.Burst = *burst
	cfg.UserAgent = "fluxssa"
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		fail("http client: %v", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		fail("rest mapper: %v", err)
	}
	kubeClient, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		fail("client: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	// Namespaced objects without a namespace go to --namespace (kustomize's namespace transformer
	// does this for a Kustomization with targetNamespace; kubectl does it with -n).
	for _, o := range objects {
		if o.GetNamespace() != "" {
			continue
		}
		m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			// A kind whose CRD is in the same file is not known yet; ApplyAllStaged applies the
			// CRD first. Treat it as namespaced only if the CRD says so is beyond this tool.
			continue
		}
		if m.Scope.Name() == apimeta.RESTScopeNameNamespace {
			o.SetNamespace(*namespace)
		}
	}

	poller := polling.NewStatusPoller(kubeClient, mapper, polling.Options{})
	manager := ssa.NewResourceManager(kubeClient, poller, ssa.Owner{Field: *fieldManager, Group: group})
	manager.SetOwnerLabels(objects, *owner, *namespace)
	manager.SetConcurrency(*concurrency)

	// The options kustomize-controller builds in KustomizationReconciler.apply (v1.9 and
	// v1.10; v1.10's CustomStageKinds, MigrateAPIVersion, DriftIgnoreRules and
	// FieldManagersBeforeDryRun are empty or off unless a flag, a feature gate or spec.ignore
	// sets them).
	opts := ssa.DefaultApplyOptions()
	opts.Force = *force
	opts.ExclusionSelector = map[string]string{group + "/reconcile": "disabled", group + "/ssa": "Ignore"}
	opts.IfNotPresentSelector = map[string]string{group + "/ssa": "IfNotPresent"}
	opts.ForceSelector = map[string]string{group + "/force": "enabled"}
	opts.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation, group + "/checksum", "fluxcd.io/sync-checksum"},
		Labels:      []string{"fluxcd.io/sync-gc-mark"},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: *fieldManager, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{group + "/ssa": "Merge"},
	}

	start := time.Now()
	if err := normalize.UnstructuredList(objects); err != nil {
		fail("normalize: %v", err)
	}
	changeSet, err := manager.ApplyAllStaged(ctx, objects, opts)
	elapsed := time.Since(start)
	if err != nil {
		fail("apply: %v", err)
	}
	fmt.Printf("fluxssa: applied %d objects in %.3f s\n", len(objects), elapsed.Seconds())
	if os.Getenv("FLUXSSA_VERBOSE") != "" {
		for _, e := range changeSet.Entries {
			fmt.Fprintln(os.Stderr, e.String())
		}
	}

	if *wait {
		start = time.Now()
		if err := manager.WaitForSetWithContext(ctx, changeSet.ToObjMetadataSet(), ssa.WaitOptions{
			Interval: 5 * time.Second, // kustomize-controller's health check poll interval
			Timeout:  *timeout,
		}); err != nil {
			fail("wait: %v", err)
		}
		fmt.Printf("fluxssa: ready in %.3f s\n", time.Since(start).Seconds())
	}
}

func readAll(f *os.File) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fluxssa: error: "+format+"\n", args...)
	os.Exit(1)
}

// ssaVersion is the version of the ssa module in this binary's build information.
func ssaVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fail("no build information in this binary")
	}
	for _, dep := range info.Deps {
		if dep.Path == "github.com/fluxcd/pkg/ssa" {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	fail("github.com/fluxcd/pkg/ssa is not in this binary's build information")
	return ""
}
