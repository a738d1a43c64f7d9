package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
)

// fakeReconciler builds a reconciler over fake clients holding m and its
// Secrets, with funcs intercepting the Messenger client.
func fakeReconciler(t *testing.T, m *tetrav1.Messenger, funcs interceptor.Funcs) (*MessengerReconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := tetrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	secrets := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: "pg"}, Data: map[string][]byte{"url": []byte("postgres://db/tetra")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: "jwt"}, Data: map[string][]byte{"secret": []byte("0123456789abcdef0123")}},
	}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m).WithStatusSubresource(&tetrav1.Messenger{}).
		WithInterceptorFuncs(funcs).Build()
	return &MessengerReconciler{
		Client: base, APIReader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(secrets...).Build(),
		Scheme: scheme, Recorder: events.NewFakeRecorder(100), DefaultImage: "example.test/tetra:1",
	}, base
}

func fakeMessenger(name string) *tetrav1.Messenger {
	return &tetrav1.Messenger{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 3},
		Spec: tetrav1.MessengerSpec{
			PostgreSQL: tetrav1.PostgreSQLSpec{SecretRef: tetrav1.URLSecretRef{Name: "pg", Key: "url"}},
			JWT:        tetrav1.JWTSpec{SecretRef: tetrav1.JWTSecretRef{Name: "jwt", Key: "secret"}},
		},
	}
}

func reconcileOnce(t *testing.T, r *MessengerReconciler, name string) (ctrl.Result, error) {
	t.Helper()
	return r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}})
}

func readMessenger(t *testing.T, c client.Client, name string) *tetrav1.Messenger {
	t.Helper()
	var m tetrav1.Messenger
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestApplyFailureReachesStatus: a failed apply sets Degraded=ApplyFailed
// (with the error) and Ready=False for the current generation, and the
// error is still returned, without a RequeueAfter, for a retry.
func TestApplyFailureReachesStatus(t *testing.T) {
	boom := errors.New("admission webhook said no")
	r, c := fakeReconciler(t, fakeMessenger("chat"), interceptor.Funcs{
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return boom
		},
	})
	res, err := reconcileOnce(t, r, "chat")
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	if res != (ctrl.Result{}) {
		t.Fatalf("result %+v together with an error", res)
	}
	m := readMessenger(t, c, "chat")
	if m.Status.ObservedGeneration != 3 {
		t.Fatalf("observedGeneration %d", m.Status.ObservedGeneration)
	}
	d := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionDegraded)
	if d == nil || d.Status != metav1.ConditionTrue || d.Reason != "ApplyFailed" || !strings.Contains(d.Message, boom.Error()) {
		t.Fatalf("degraded %+v", d)
	}
	if rd := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionReady); rd == nil || rd.Status != metav1.ConditionFalse {
		t.Fatalf("ready %+v", rd)
	}
}

// TestStatusConflictRequeuesQuietly: a status patch that loses the
// optimistic lock is requeued, not returned as an error.
func TestStatusConflictRequeuesQuietly(t *testing.T) {
	r, _ := fakeReconciler(t, fakeMessenger("chat"), interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return apierrors.NewConflict(schema.GroupResource{Group: "tetra.dev", Resource: "messengers"}, "chat", errors.New("the object has been modified"))
		},
	})
	res, err := reconcileOnce(t, r, "chat")
	if err != nil {
		t.Fatalf("conflict returned as an error: %v", err)
	}
	if res.RequeueAfter <= 0 {
		t.Fatalf("result %+v: not requeued", res)
	}
}

// TestInvalidNameDegrades: a name that cannot name the children (the CRD
// refuses it; this is for CRDs installed before that rule) renders nothing.
func TestInvalidNameDegrades(t *testing.T) {
	for _, name := range []string{strings.Repeat("a", 64), "a.b", "1chat"} {
		applied := false
		r, c := fakeReconciler(t, fakeMessenger(name), interceptor.Funcs{
			Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
				applied = true
				return nil
			},
		})
		if _, err := reconcileOnce(t, r, name); err != nil {
			t.Fatal(err)
		}
		m := readMessenger(t, c, name)
		d := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != "InvalidName" || applied {
			t.Fatalf("%q: degraded %+v, applied %v", name, d, applied)
		}
	}
}
