package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CredentialStore keeps the server's own credential, which it got once for
// the cluster's join token.
type CredentialStore interface {
	// Load returns "" when there is none yet.
	Load(ctx context.Context) (string, error)
	Save(ctx context.Context, credential string) error
	// Writable checks, before the agent registers, that Save will be able
	// to keep the credential: a registration whose credential is lost
	// leaves its name taken until someone revokes it.
	Writable(ctx context.Context) error
}

// FileStore keeps the credential in a file readable by its owner only: the
// agent on a host.
type FileStore struct{ Path string }

// Load reads the credential file.
func (f FileStore) Load(context.Context) (string, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the credential: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Save writes the credential file with mode 0600, atomically.
func (f FileStore) Save(_ context.Context, credential string) error {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	tmp := f.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(credential+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the credential: %w", err)
	}
	return os.Rename(tmp, f.Path)
}

// Writable creates the state directory and writes and removes a file in it.
func (f FileStore) Writable(context.Context) error {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	probe := f.Path + ".probe"
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return fmt.Errorf("the state directory is not writable: %w", err)
	}
	return os.Remove(probe)
}

// SecretStore keeps the credential in a Kubernetes Secret: the in-cluster
// agent, one Secret per replica (the replica's stable name).
type SecretStore struct {
	Client          kubernetes.Interface
	Namespace, Name string
}

const credentialKey = "credential"

// Load reads the Secret.
func (s SecretStore) Load(ctx context.Context) (string, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return strings.TrimSpace(string(sec.Data[credentialKey])), nil
}

// Save creates the Secret.
func (s SecretStore) Save(ctx context.Context, credential string) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "nebulactrl"}},
		Data:       map[string][]byte{credentialKey: []byte(credential)},
	}
	_, err := s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("saving the credential in secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// Writable asks the API server, without keeping anything (a dry run),
// whether the Secret may be created.
func (s SecretStore) Writable(ctx context.Context) error {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace}, Data: map[string][]byte{credentialKey: nil}}
	_, err := s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("the credential could not be kept in secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
