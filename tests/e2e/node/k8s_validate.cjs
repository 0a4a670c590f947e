// Validates Kubernetes manifests (JSON files, `moe deploy k8s --format json`) against the
// Kubernetes OpenAPI schemas of the npm package kubernetes-models (offline).
// Usage: NODE_PATH=<node_modules> node k8s_validate.cjs FILE...
// Prints one line per file: "ok KIND NAME" or "invalid FILE: <ajv errors>"; exit 1 if any is invalid.
const fs = require('fs');
const models = {
  'v1/ConfigMap': require('kubernetes-models/v1/ConfigMap').ConfigMap,
  'v1/Service': require('kubernetes-models/v1/Service').Service,
  'apps/v1/Deployment': require('kubernetes-models/apps/v1/Deployment').Deployment,
  'apps/v1/StatefulSet': require('kubernetes-models/apps/v1/StatefulSet').StatefulSet,
};
let bad = 0;
for (const file of process.argv.slice(2)) {
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  const Model = models[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) {
    console.log(`invalid ${file}: no schema for ${doc.apiVersion} ${doc.kind}`);
    bad++;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`ok ${doc.kind} ${doc.metadata.name}`);
  } catch (e) {
    console.log(`invalid ${file}: ${e.message}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
