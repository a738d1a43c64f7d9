package version

// Version is the release of tetra: the tag of both images
// (ghcr.io/tetra-messenger/tetra and ghcr.io/tetra-messenger/tetra-operator),
// the Helm chart's version and appVersion, the operator's default workload
// image and config/manager's image tag. TestVersionIsOneVersion checks that
// every one of those places says the same.
const Version = "0.1.0"

// WorkloadImage is the operator's default workload image.
const WorkloadImage = "ghcr.io/tetra-messenger/tetra:" + Version

// OperatorImage is the operator's own image.
const OperatorImage = "ghcr.io/tetra-messenger/tetra-operator:" + Version
