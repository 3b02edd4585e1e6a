// Command cainjector runs cert-manager's CA injector: the controllers of cert-manager's
// pkg/controller/cainjector (RegisterAllInjectors), set up as cert-manager's cmd/cainjector/app does it with the
// binary's default options. The binary's own module (cert-manager's cmd/cainjector, "cainjector-binary") is not
// published on the Go module proxy, so this main stands in for it; the reconcilers, their field manager
// (cert-manager-cainjector, from the User-Agent) and their server-side apply with force are cert-manager's own.
//
// It reads the kubeconfig named by $KUBECONFIG (or --kubeconfig) and takes these flags of the real binary:
// --leader-elect, --leader-election-namespace, --namespace, --enable-certificates-data-source, --metrics-listen-address.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	leaderElect := flag.Bool("leader-elect", true, "take the leader-election Lease before injecting")
	leaderNamespace := flag.String("leader-election-namespace", "kube-system", "namespace of the leader-election Lease")
	namespace := flag.String("namespace", "", "inject only into objects of this namespace (all when empty)")
	certificates := flag.Bool("enable-certificates-data-source", true, "inject CAs of cert-manager Certificates")
	metrics := flag.String("metrics-listen-address", "0", "metrics address (0: none)")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *leaderElect, *leaderNamespace, *namespace, *certificates, *metrics); err != nil {
		fmt.Fprintln(os.Stderr, "cainjector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, leaderElect bool, leaderNamespace, namespace string, certificates bool, metrics string) error {
	config := util.RestConfigWithUserAgent(ctrl.GetConfigOrDie(), "cainjector")
	var namespaces map[string]cache.Config
	if namespace != "" {
		namespaces = map[string]cache.Config{namespace: {}}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	// cert-manager's defaults (internal/apis/config/cainjector/v1alpha1/defaults.go)
	lease, renew, retry := 60*time.Second, 40*time.Second, 15*time.Second
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: namespaces},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:                leaderElect,
		LeaderElectionNamespace:       leaderNamespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionLabels:          map[string]string{"app.kubernetes.io/managed-by": "cert-manager-cainjector"},
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaseDuration:                 &lease,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
		Metrics:                       metricsserver.Options{BindAddress: metrics},
	})
	if err != nil {
		return fmt.Errorf("error creating manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return fmt.Errorf("failed to register controllers: %w", err)
	}
	return mgr.Start(ctx)
}
