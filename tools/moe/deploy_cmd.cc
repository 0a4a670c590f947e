// moe deploy k8s: Kubernetes manifests for a config file.
//   moe deploy k8s --config serve.yaml --ranks-per-pod 2 --image IMG --out k8s/
// The layout (README "Deploying on Kubernetes"):
//   - ConfigMap NAME-config: the config file, mounted at /etc/moe/config.yaml;
//   - Deployment NAME-frontend (1 replica): `moe serve --supervise` (OpenAI API, /health,
//     /metrics, the request journal and restarts) and the worker group's first
//     ranks-per-pod ranks, which mpirun starts on its own pod (rank 0 serves the
//     supervisor's endpoint on 127.0.0.1);
//   - StatefulSet NAME-experts (pods - 1 replicas): the other ranks; each pod runs sshd for
//     mpirun (port 2222, keys from the Secret NAME-ssh), found through the headless
//     Service NAME-experts (NAME-experts-<i>.NAME-experts);
//   - Service NAME: the front end's HTTP port.
// World size = pods x ranks per pod = parallelism.ep x parallelism.tp of the config.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/config/config_file.h"
#include "moe/core/atomic_file.h"

namespace moe::cli {
namespace {

using nlohmann::json;

struct DeployFlags {
  std::string config;
  std::string out = "k8s";
  std::string name = "moe";
  std::string image = "moe-engine:latest";
  std::string namespace_ = "default";
  int ranks_per_pod = 1;
  std::string memory = "16Gi";  // per pod
  std::string format = "yaml";
};

// JSON -> block YAML (plain keys where safe; strings double-quoted with JSON escapes, valid YAML).
void emit_yaml(const json& j, int indent, std::ostringstream& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const json& v = it.value();
      static const std::regex plain("[A-Za-z_][A-Za-z0-9_./-]*");
      out << pad << (std::regex_match(it.key(), plain) ? it.key() : json(it.key()).dump()) << ":";
      if ((v.is_object() || v.is_array()) && !v.empty()) {
        out << "\n";
        emit_yaml(v, indent + 2, out);
      } else {
        out << " " << v.dump() << "\n";
      }
    }
  } else if (j.is_array()) {
    for (const json& v : j) {
      if ((v.is_object() || v.is_array()) && !v.empty()) {
        std::ostringstream inner;
        emit_yaml(v, indent + 2, inner);
        std::string s = inner.str();
        s.replace(static_cast<size_t>(indent), 2, "- ");  // the first line's indent becomes the dash
        out << s;
      } else {
        out << pad << "- " << v.dump() << "\n";
      }
    }
  }
}

int config_int(const config::ConfigFile& f, std::string_view key, int fallback) {
  const config::ConfigValue* v = f.find(key);
  return v ? std::stoi(v->text) : fallback;
}

json labels(const DeployFlags& f, const std::string& component) {
  return {{"app.kubernetes.io/name", f.name}, {"app.kubernetes.io/component", component}};
}

json metadata(const DeployFlags& f, const std::string& name, const std::string& component) {
  return {{"name", name}, {"namespace", f.namespace_}, {"labels", labels(f, component)}};
}

json resources(const DeployFlags& f, int cpus) {
  const json amount = {{"cpu", std::to_string(cpus)}, {"memory", f.memory}};
  return {{"requests", amount}, {"limits", amount}};
}

json topology_spread(const DeployFlags& f) {
  // Ranks spread over nodes (one node's failure takes the fewest ranks) and zones.
  json sel = {{"matchLabels", {{"app.kubernetes.io/name", f.name}}}};
  return json::array({{{"maxSkew", 1}, {"topologyKey", "kubernetes.io/hostname"}, {"whenUnsatisfiable", "DoNotSchedule"},
                       {"labelSelector", sel}},
                      {{"maxSkew", 1}, {"topologyKey", "topology.kubernetes.io/zone"},
                       {"whenUnsatisfiable", "ScheduleAnyway"}, {"labelSelector", sel}}});
}

json volumes(const DeployFlags& f) {
  return json::array({{{"name", "config"}, {"configMap", {{"name", f.name + "-config"}}}},
                      {{"name", "ssh"}, {"secret", {{"secretName", f.name + "-ssh"}, {"defaultMode", 256}}}}});
}

json mounts() {
  return json::array({{{"name", "config"}, {"mountPath", "/etc/moe"}, {"readOnly", true}},
                      {{"name", "ssh"}, {"mountPath", "/etc/moe-ssh"}, {"readOnly", true}}});
}

int run_deploy(const DeployFlags& f) {
  auto loaded = config::load_config_file(f.config);
  if (!loaded.ok()) return fail(loaded.status().message());
  const config::ConfigFile& cfg = loaded.value();
  std::ifstream in(f.config);
  std::stringstream text;
  text << in.rdbuf();
  if (f.ranks_per_pod < 1) return fail("--ranks-per-pod must be >= 1 (got " + std::to_string(f.ranks_per_pod) + ")");
  static const std::regex dns1123("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  if (!std::regex_match(f.name, dns1123) || f.name.size() > 40) {
    return fail("--name '" + f.name + "' must be a DNS-1123 label of at most 40 characters (lower-case letters, digits, "
                "'-'): Kubernetes object and pod names derive from it");
  }
  if (f.format != "yaml" && f.format != "json") return fail("--format must be yaml or json (got '" + f.format + "')");
  const int ep = config_int(cfg, "parallelism.ep", 1), tp = config_int(cfg, "parallelism.tp", 1);
  const int world = ep * tp;
  if (world % f.ranks_per_pod != 0) {
    return fail("--ranks-per-pod " + std::to_string(f.ranks_per_pod) + " does not divide the world size " +
                std::to_string(world) + " (parallelism.ep x parallelism.tp of " + f.config + ")");
  }
  if (tp > f.ranks_per_pod || f.ranks_per_pod % tp != 0) {
    return fail("parallelism.tp " + std::to_string(tp) + " must divide --ranks-per-pod " +
                std::to_string(f.ranks_per_pod) + " (a TP group lies on one node)");
  }
  const int pods = world / f.ranks_per_pod;
  const int port = config_int(cfg, "serving.port", 8000);
  const int threads = std::max(1, config_int(cfg, "parallelism.threads", 1));
  const int cpus = threads * f.ranks_per_pod;
  const std::string experts = f.name + "-experts";
  const std::string slots = ":" + std::to_string(f.ranks_per_pod);
  // mpirun's hosts: the front end's pod first (rank 0 there), then the expert pods.
  std::string hosts = "$(hostname)" + slots;
  for (int i = 0; i + 1 < pods; ++i) hosts += "," + experts + "-" + std::to_string(i) + "." + experts + slots;
  const std::string ssh_setup =
      "mkdir -p /root/.ssh && cp /etc/moe-ssh/* /root/.ssh/ && chmod 600 /root/.ssh/* && ";
  const std::string serve =
      ssh_setup + "exec moe serve --supervise --config /etc/moe/config.yaml --host 0.0.0.0 --port " +
      std::to_string(port) + " --ep " + std::to_string(ep) + (tp > 1 ? " --tp " + std::to_string(tp) : "") +
      " --mpirun-arg=--host --mpirun-arg=" + hosts +
      " --mpirun-arg=--mca --mpirun-arg=plm_rsh_args --mpirun-arg='-p 2222 -o StrictHostKeyChecking=no'";
  const json health = {{"httpGet", {{"path", "/health"}, {"port", port}}}};
  json readiness = health, liveness = health;
  readiness["periodSeconds"] = 5;
  readiness["failureThreshold"] = 3;
  liveness["initialDelaySeconds"] = 60;  // model load
  liveness["periodSeconds"] = 10;
  liveness["failureThreshold"] = 6;
  const json prometheus = {{"prometheus.io/scrape", "true"}, {"prometheus.io/port", std::to_string(port)},
                           {"prometheus.io/path", "/metrics"}};

  std::vector<std::pair<std::string, json>> docs;
  docs.push_back({"configmap", {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", metadata(f, f.name + "-config", "config")},
                                {"data", {{"config.yaml", text.str()}}}}});
  json fe_pod = {{"metadata", {{"labels", labels(f, "frontend")}, {"annotations", prometheus}}},
                 {"spec",
                  {{"containers", json::array({{{"name", "moe"},
                                                {"image", f.image},
                                                {"command", json::array({"/bin/sh", "-c", serve})},
                                                {"ports", json::array({{{"name", "http"}, {"containerPort", port}}})},
                                                {"resources", resources(f, cpus)},
                                                {"readinessProbe", readiness},
                                                {"livenessProbe", liveness},
                                                {"volumeMounts", mounts()}}})},
                   {"topologySpreadConstraints", topology_spread(f)},
                   {"volumes", volumes(f)}}}};
  docs.push_back({"frontend-deployment",
                  {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"metadata", metadata(f, f.name + "-frontend", "frontend")},
                   {"spec", {{"replicas", 1}, {"strategy", {{"type", "Recreate"}}},
                             {"selector", {{"matchLabels", labels(f, "frontend")}}}, {"template", fe_pod}}}}});
  json fe_svc_meta = metadata(f, f.name, "frontend");
  fe_svc_meta["annotations"] = prometheus;
  docs.push_back({"frontend-service",
                  {{"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", fe_svc_meta},
                   {"spec", {{"selector", labels(f, "frontend")},
                             {"ports", json::array({{{"name", "http"}, {"port", port}, {"targetPort", port}}})}}}}});
  if (pods > 1) {
    const json ssh_probe = {{"tcpSocket", {{"port", 2222}}}, {"periodSeconds", 10}};
    json ex_pod = {{"metadata", {{"labels", labels(f, "experts")}}},
                   {"spec",
                    {{"containers",
                      json::array({{{"name", "moe"},
                                    {"image", f.image},
                                    {"command", json::array({"/bin/sh", "-c", ssh_setup + "exec /usr/sbin/sshd -D -e -p 2222"})},
                                    {"ports", json::array({{{"name", "ssh"}, {"containerPort", 2222}}})},
                                    {"resources", resources(f, cpus)},
                                    {"readinessProbe", ssh_probe},
                                    {"livenessProbe", ssh_probe},
                                    {"volumeMounts", mounts()}}})},
                     {"topologySpreadConstraints", topology_spread(f)},
                     {"volumes", volumes(f)}}}};
    docs.push_back({"experts-service",
                    {{"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", metadata(f, experts, "experts")},
                     {"spec", {{"clusterIP", "None"}, {"publishNotReadyAddresses", true},
                               {"selector", labels(f, "experts")},
                               {"ports", json::array({{{"name", "ssh"}, {"port", 2222}}})}}}}});
    docs.push_back({"experts-statefulset",
                    {{"apiVersion", "apps/v1"}, {"kind", "StatefulSet"}, {"metadata", metadata(f, experts, "experts")},
                     {"spec", {{"serviceName", experts}, {"replicas", pods - 1}, {"podManagementPolicy", "Parallel"},
                               {"selector", {{"matchLabels", labels(f, "experts")}}}, {"template", ex_pod}}}}});
  }
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) return fail("--out " + f.out + ": " + ec.message());
  for (const auto& [file, doc] : docs) {
    std::string body;
    if (f.format == "json") {
      body = doc.dump(2) + "\n";
    } else {
      std::ostringstream y;
      emit_yaml(doc, 0, y);
      body = y.str();
    }
    const std::string path = f.out + "/" + file + "." + f.format;
    if (Status st = write_file_atomically(path, body); !st.ok()) return fail(st.message());
    std::printf("wrote %s\n", path.c_str());
  }
  std::printf("world %d ranks = %d pod(s) x %d rank(s) (front end + %d expert pod(s)); port %d; create the Secret "
              "%s-ssh (id_rsa, authorized_keys) before applying\n",
              world, pods, f.ranks_per_pod, pods - 1, port, f.name.c_str());
  for (const config::ConfigWarning& w : cfg.warnings) {
    std::fprintf(stderr, "warning: %s:%d: %s: %s\n", f.config.c_str(), w.line, w.key.c_str(), w.message.c_str());
  }
  return 0;
}

}  // namespace

RunFn add_deploy_command(CLI::App& deploy) {
  auto f = std::make_shared<DeployFlags>();
  auto* k8s = deploy.add_subcommand(
      "k8s", "Kubernetes manifests: front end Deployment + Service, expert StatefulSet + headless Service, ConfigMap");
  k8s->add_option("--config", f->config, "YAML config (parallelism.ep x tp = world size, serving.port, threads)")
      ->required();
  k8s->add_option("--out", f->out, "Directory to write the manifests to")->capture_default_str();
  k8s->add_option("--name", f->name, "Name prefix of the objects")->capture_default_str();
  k8s->add_option("--image", f->image, "Container image with moe, mpirun and sshd")->capture_default_str();
  k8s->add_option("--namespace", f->namespace_, "Namespace")->capture_default_str();
  k8s->add_option("--ranks-per-pod", f->ranks_per_pod, "EP ranks per pod (pods = world / this)")->capture_default_str();
  k8s->add_option("--memory", f->memory, "Memory request and limit per pod (moe doctor sizes it)")->capture_default_str();
  k8s->add_option("--format", f->format, "yaml or json")->capture_default_str();
  return [f] { return run_deploy(*f); };
}

}  // namespace moe::cli
