#include "engine/passes/pass.h"

#include <fmt/format.h>

#include "engine/core/check.h"
#include "engine/core/env_options.h"
#include "engine/core/interrupt.h"

namespace tsr::passes {

namespace {

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else out += c;
    }
  }
  return out + "\"";
}

Snapshot takeSnapshot(const ir::Graph& g, const ir::OpRegistry& reg) {
  Snapshot snap;
  snap.graph = std::make_shared<const ir::Graph>(g);
  snap.text = ir::print(g, reg, &snap.nodeLines);
  return snap;
}

int numNodes(const ir::Graph& g) { return static_cast<int>(g.nodes().size()); }

}  // namespace

// ---- decisions

const char* decisionKindName(Decision::Kind k) {
  switch (k) {
    case Decision::Kind::Applied: return "applied";
    case Decision::Kind::Rejected: return "rejected";
    case Decision::Kind::Note: return "note";
  }
  return "?";
}

const char* fusionReasonName(FusionReason r) {
  switch (r) {
    case FusionReason::None: return "none";
    case FusionReason::Fused: return "fused";
    case FusionReason::Merged: return "merged";
    case FusionReason::DifferentSpaces: return "different_iteration_spaces";
    case FusionReason::AfterReduction: return "after_reduction";
    case FusionReason::OpaqueProducer: return "opaque_producer";
    case FusionReason::ReadsThroughView: return "reads_through_view";
    case FusionReason::WouldCycle: return "would_cycle";
    case FusionReason::NoLoopLowering: return "no_loop_lowering";
    case FusionReason::UnsupportedDType: return "unsupported_dtype";
    case FusionReason::OwnKernel: return "own_kernel";
    case FusionReason::Materialised: return "materialised";
    case FusionReason::NoPostOp: return "no_post_op";
    case FusionReason::Recomputed: return "recomputed";
    case FusionReason::FusionOff: return "fusion_off";
    case FusionReason::Unrelated: return "unrelated";
  }
  return "?";
}

std::string Decision::toString() const {
  std::string s = fmt::format("[{} {}] ", step, pass);
  if (kind != Kind::Applied) s += std::string(decisionKindName(kind)) + ": ";
  if (!nodes.empty()) {
    s += "node ";
    for (ir::NodeId r : region) s += std::to_string(r) + "/";
    s += joinInts(std::vector<int64_t>(nodes.begin(), nodes.end())) + " ";
  }
  if (!prov.empty()) s += "@ " + prov.toString() + " ";
  if (reason != FusionReason::None) s += fmt::format("[{}] ", fusionReasonName(reason));
  if (s.back() == ' ') s.back() = ':';
  return s + " " + message;
}

std::vector<Decision> DecisionLog::forPass(std::string_view pass) const {
  std::vector<Decision> out;
  for (const auto& d : m_decisions)
    if (d.pass == pass) out.push_back(d);
  return out;
}

std::string DecisionLog::toText() const {
  std::string s;
  for (const auto& d : m_decisions) s += d.toString() + "\n";
  return s;
}

void PassContext::record(const ir::Graph& g, ir::NodeId node, std::string message, Decision::Kind kind) {
  record(g, std::vector<ir::NodeId>{node}, std::move(message), kind, FusionReason::None);
}

void PassContext::record(const ir::Graph& g, std::vector<ir::NodeId> nodes, std::string message, Decision::Kind kind,
                         FusionReason reason) {
  Decision d;
  d.kind = kind;
  d.reason = reason;
  const ir::NodeId node = nodes.empty() ? ir::kNone : nodes.front();
  if (node >= 0 && node < numNodes(g)) {
    d.values = g.nodes()[static_cast<size_t>(node)].results;
    d.prov = g.nodes()[static_cast<size_t>(node)].prov;
  }
  d.nodes = std::move(nodes);
  d.message = std::move(message);
  record(std::move(d));
}

void PassContext::record(Decision d) {
  if (d.pass.empty()) d.pass = m_pass;
  if (d.step < 0) d.step = m_step;
  if (d.region.empty()) d.region = m_region;
  m_log.add(std::move(d));
}

void PassContext::addReport(std::string name, std::string text) {
  for (Report& r : m_reports)
    if (r.name == name) {
      r = Report{std::move(name), m_pass, std::move(text)};
      return;
    }
  m_reports.push_back(Report{std::move(name), m_pass, std::move(text)});
}

// ---- report

bool PipelineReport::changed() const {
  for (const auto& s : steps)
    if (s.changed) return true;
  return false;
}

std::string PipelineReport::toText() const {
  std::string s = fmt::format("pipeline {}: {} -> {} nodes in {:.3f} ms\n", pipeline, nodesBefore, nodesAfter,
                              totalSeconds * 1e3);
  s += fmt::format("{:>4}  {:<30}{:>10}  {:<8}{:>6} -> {}\n", "step", "pass", "ms", "changed", "nodes", "nodes");
  for (size_t i = 0; i < steps.size(); ++i) {
    const PassStep& p = steps[i];
    std::string name = p.group.empty() ? p.pass : fmt::format("{}/{}#{}", p.group, p.pass, p.iteration);
    s += fmt::format("{:>4}  {:<30}{:>10.3f}  {:<8}{:>6} -> {}\n", i + 1, name, p.seconds * 1e3,
                     p.changed ? "yes" : "no", p.nodesBefore, p.nodesAfter);
  }
  for (const auto& g : groups)
    if (!g.converged) s += fmt::format("group {} did not converge in {} iterations\n", g.name, g.iterations);
  return s;
}

std::string PipelineReport::toJson() const {
  std::string s = "{\n  \"pipeline\": " + jsonString(pipeline) + ",\n";
  s += fmt::format("  \"total_seconds\": {:.9f},\n  \"nodes_before\": {},\n  \"nodes_after\": {},\n", totalSeconds,
                   nodesBefore, nodesAfter);
  s += "  \"steps\": [";
  for (size_t i = 0; i < steps.size(); ++i) {
    const PassStep& p = steps[i];
    s += i ? ",\n    " : "\n    ";
    s += fmt::format(
        "{{\"step\": {}, \"pass\": {}, \"group\": {}, \"iteration\": {}, \"seconds\": {:.9f}, \"changed\": {}, "
        "\"nodes_before\": {}, \"nodes_after\": {}}}",
        i + 1, jsonString(p.pass), jsonString(p.group), p.iteration, p.seconds, p.changed ? "true" : "false",
        p.nodesBefore, p.nodesAfter);
  }
  s += steps.empty() ? "],\n" : "\n  ],\n";
  s += "  \"groups\": [";
  for (size_t i = 0; i < groups.size(); ++i) {
    s += i ? ", " : "";
    s += fmt::format("{{\"name\": {}, \"iterations\": {}, \"converged\": {}}}", jsonString(groups[i].name),
                     groups[i].iterations, groups[i].converged ? "true" : "false");
  }
  return s + "]\n}\n";
}

// ---- manager

PassManager& PassManager::add(std::unique_ptr<Pass> pass) {
  TSR_CHECK(pass != nullptr);
  Entry e;
  e.passes.push_back(std::move(pass));
  m_entries.push_back(std::move(e));
  return *this;
}

PassManager& PassManager::addFixedPoint(std::string groupName, std::vector<std::unique_ptr<Pass>> passes,
                                        int maxIterations) {
  TSR_CHECK(!groupName.empty() && !passes.empty() && maxIterations >= 1);
  Entry e;
  e.group = std::move(groupName);
  e.passes = std::move(passes);
  e.maxIterations = maxIterations;
  m_entries.push_back(std::move(e));
  return *this;
}

std::vector<std::string> PassManager::describe() const {
  std::vector<std::string> out;
  for (const auto& e : m_entries) {
    if (e.group.empty()) {
      out.emplace_back(e.passes[0]->name());
      continue;
    }
    std::string s = e.group + "(";
    for (size_t i = 0; i < e.passes.size(); ++i) s += (i ? ", " : "") + std::string(e.passes[i]->name());
    out.push_back(s + ")");
  }
  return out;
}

namespace {

// PipelineOptions::verify (after each pass, or not at all), unless TESSERA_VERIFY_PASSES says otherwise.
VerifyPasses verifyMode(const PipelineOptions& o) {
  if (const auto& v = envOptions().verifyPasses) return *v;
  return o.verify ? VerifyPasses::Each : VerifyPasses::Off;
}

}  // namespace

Result<bool> PassManager::runOne(Pass& pass, const std::string& group, int iteration, ir::Graph& g,
                                 PassContext& ctx, PipelineReport& report) {
  int step = static_cast<int>(report.steps.size());
  // Ctrl-C in Python: stop between passes.
  if (interruptRequested()) return makeError("pass {} (step {}): {}", pass.name(), step + 1, kInterruptedMessage);
  PassStep rec;
  rec.pass = std::string(pass.name());
  rec.group = group;
  rec.iteration = iteration;
  rec.nodesBefore = numNodes(g);
  ctx.enterPass(rec.pass, step);
  auto t0 = std::chrono::steady_clock::now();
  auto changed = pass.run(g, ctx);
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.enterPass("", -1);
  if (!changed.ok()) return makeError("pass {} (step {}): {}", rec.pass, step + 1, changed.error().message);
  rec.changed = *changed;
  rec.nodesAfter = numNodes(g);
  if (verifyMode(m_options) == VerifyPasses::Each) {
    auto st = ir::verify(g, ctx.registry());
    if (!st.ok())
      return makeError("after pass {} (step {}) the graph is invalid: {}", rec.pass, step + 1, st.error().message);
  }
  if (m_options.snapshots) rec.after = takeSnapshot(g, ctx.registry());
  report.steps.push_back(std::move(rec));
  if (m_options.onStep) m_options.onStep(step, report.steps.back());
  return *changed;
}

Result<PipelineReport> PassManager::run(ir::Graph& g, PassContext& ctx) {
  PipelineReport report;
  report.pipeline = m_name;
  report.nodesBefore = numNodes(g);
  const VerifyPasses verify = verifyMode(m_options);
  if (verify != VerifyPasses::Off && m_options.verifyInput) {
    auto st = ir::verify(g, ctx.registry());
    if (!st.ok()) return makeError("pipeline {}: the input graph is invalid: {}", m_name, st.error().message);
  }
  if (m_options.snapshots) report.input = takeSnapshot(g, ctx.registry());
  auto t0 = std::chrono::steady_clock::now();
  for (auto& e : m_entries) {
    if (e.group.empty()) {
      TSR_TRY(runOne(*e.passes[0], "", 0, g, ctx, report));
      continue;
    }
    GroupSummary summary{e.group, 0, false};
    while (summary.iterations < e.maxIterations && !summary.converged) {
      bool changed = false;
      for (auto& p : e.passes) {
        TSR_ASSIGN(bool c, runOne(*p, e.group, summary.iterations, g, ctx, report));
        changed |= c;
      }
      ++summary.iterations;
      summary.converged = !changed;
    }
    if (!summary.converged) {
      Decision d;
      d.kind = Decision::Kind::Note;
      d.pass = e.group;
      d.step = static_cast<int>(report.steps.size()) - 1;
      d.message = fmt::format("still changing after {} iterations; stopped (the graph is valid)", e.maxIterations);
      ctx.record(std::move(d));
    }
    report.groups.push_back(std::move(summary));
  }
  report.totalSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.nodesAfter = numNodes(g);
  if (verify == VerifyPasses::End) {
    auto st = ir::verify(g, ctx.registry());
    if (!st.ok())
      return makeError("after pipeline {} the graph is invalid (TESSERA_VERIFY_PASSES=each names the pass): {}",
                       m_name, st.error().message);
  }
  return report;
}

}  // namespace tsr::passes
