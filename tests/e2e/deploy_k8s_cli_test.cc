// `moe deploy k8s`: the manifests validate against the Kubernetes schemas (npm
// kubernetes-models, offline: tests/e2e/node/k8s_validate.cjs), and hold the deployment's
// invariants: world size = pods x ranks per pod, one port everywhere (container, Service,
// probes, Prometheus annotation), /health probes, rank discovery through the headless
// Service. The YAML form equals the JSON form (PyYAML via Debian's python3).
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "test_util.h"

namespace moe::testing {
namespace {

using nlohmann::json;

json load(const std::string& path) { return json::parse(read_file(path)); }

TEST(DeployK8s, ManifestsValidateAndHoldTheInvariants) {
  const char* modules = std::getenv("MOE_NODE_MODULES");
  ASSERT_TRUE(modules != nullptr && *modules)
      << "MOE_NODE_MODULES is not set: ./scripts/test.sh installs kubernetes-models@4.5.1 and sets it "
         "(or: npm install --prefix DIR kubernetes-models@4.5.1; MOE_NODE_MODULES=DIR/node_modules)";
  const std::string dir = make_temp_dir("deploy_k8s");
  write_file(dir + "/c.yaml", "parallelism:\n  ep: 6\n  threads: 2\nserving:\n  port: 8123\n");
  const CommandResult r = run_command(moe_binary() + " deploy k8s --config " + dir + "/c.yaml --ranks-per-pod 2 --name " +
                                      "mixtral --format json --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "world 6 ranks = 3 pod(s) x 2 rank(s)");
  const std::string out = dir + "/out/";
  const CommandResult v =
      run_command(std::string("NODE_PATH=") + modules + " node " + source_dir() + "/tests/e2e/node/k8s_validate.cjs " +
                  out + "configmap.json " + out + "frontend-deployment.json " + out + "frontend-service.json " + out +
                  "experts-service.json " + out + "experts-statefulset.json");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_CONTAINS(v.output, "ok Deployment mixtral-frontend");
  EXPECT_CONTAINS(v.output, "ok StatefulSet mixtral-experts");

  const json fe = load(out + "frontend-deployment.json"), svc = load(out + "frontend-service.json");
  const json ex = load(out + "experts-statefulset.json"), hl = load(out + "experts-service.json");
  const json cm = load(out + "configmap.json");
  // World size: front end pod + expert pods, each with --ranks-per-pod ranks.
  const int fe_pods = fe["spec"]["replicas"], ex_pods = ex["spec"]["replicas"];
  EXPECT_EQ((fe_pods + ex_pods) * 2, 6);
  const std::string cmd = fe["spec"]["template"]["spec"]["containers"][0]["command"][2];
  EXPECT_CONTAINS(cmd, "--ep 6");
  EXPECT_CONTAINS(cmd, "--mpirun-arg=$(hostname):2,mixtral-experts-0.mixtral-experts:2,mixtral-experts-1.mixtral-experts:2");
  // Rank discovery: the StatefulSet's pods resolve through the headless Service.
  EXPECT_EQ(hl["spec"]["clusterIP"], "None");
  EXPECT_EQ(ex["spec"]["serviceName"], "mixtral-experts");
  EXPECT_EQ(hl["spec"]["selector"], ex["spec"]["template"]["metadata"]["labels"]);
  EXPECT_EQ(svc["spec"]["selector"], fe["spec"]["template"]["metadata"]["labels"]);
  // One port: container, Service, probes, Prometheus.
  const json& c = fe["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["ports"][0]["containerPort"], 8123);
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 8123);
  EXPECT_EQ(svc["spec"]["ports"][0]["targetPort"], 8123);
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    EXPECT_EQ(c[probe]["httpGet"]["path"], "/health");
    EXPECT_EQ(c[probe]["httpGet"]["port"], 8123);
  }
  EXPECT_EQ(fe["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"], "8123");
  EXPECT_EQ(fe["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"], "/metrics");
  EXPECT_EQ(fe["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"], "true");
  // Resources: threads x ranks per pod CPUs; topology spread over hosts.
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "4");
  EXPECT_EQ(fe["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["topologyKey"], "kubernetes.io/hostname");
  EXPECT_EQ(ex["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["topologyKey"], "kubernetes.io/hostname");
  // The config file travels unchanged.
  EXPECT_EQ(cm["data"]["config.yaml"], read_file(dir + "/c.yaml"));

  // The YAML form is the same objects.
  ASSERT_EQ(run_command(moe_binary() + " deploy k8s --config " + dir + "/c.yaml --ranks-per-pod 2 --name mixtral --out " +
                        dir + "/yaml")
                .exit_code,
            0);
  for (const char* name : {"configmap", "frontend-deployment", "frontend-service", "experts-service", "experts-statefulset"}) {
    const CommandResult y = run_command("/usr/bin/python3 -c 'import json,sys,yaml; print(json.dumps(yaml.safe_load("
                                        "open(sys.argv[1]))))' " + dir + "/yaml/" + name + ".yaml");
    ASSERT_EQ(y.exit_code, 0) << name << y.output;
    EXPECT_EQ(json::parse(y.output), load(out + name + ".json")) << name;
  }
}

TEST(DeployK8s, RefusesWhatCannotBeLaidOut) {
  const std::string dir = make_temp_dir("deploy_k8s_bad");
  write_file(dir + "/c.yaml", "parallelism:\n  ep: 4\n");
  const CommandResult r =
      run_command(moe_binary() + " deploy k8s --config " + dir + "/c.yaml --ranks-per-pod 3 --out " + dir + "/o");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "--ranks-per-pod 3 does not divide the world size 4");
  const CommandResult n = run_command(moe_binary() + " deploy k8s --config " + dir + "/c.yaml --name Bad_Name");
  EXPECT_EQ(n.exit_code, 1);
  EXPECT_CONTAINS(n.output, "--name 'Bad_Name'");
  const CommandResult m = run_command(moe_binary() + " deploy k8s");
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_CONTAINS(m.output, "--config");
  write_file(dir + "/bad.yaml", "parallelism:\n  eep: 4\n");
  const CommandResult b = run_command(moe_binary() + " deploy k8s --config " + dir + "/bad.yaml");
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_CONTAINS(b.output, "bad.yaml:2: parallelism.eep: unknown key (did you mean parallelism.ep?)");
}

}  // namespace
}  // namespace moe::testing
