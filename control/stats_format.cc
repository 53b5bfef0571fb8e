#include "control/stats_format.h"

#include <google/protobuf/util/json_util.h>

#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rdv::control {
namespace {

// Labels in a stable order: `name{a="x",b="y"}`.
std::string LabelsOf(const StatsCounter& counter,
                     const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> labels(counter.labels().begin(), counter.labels().end());
  labels.insert(extra.begin(), extra.end());
  if (labels.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [name, value] : labels) parts.push_back(absl::StrCat(name, "=\"", value, "\""));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string Number(double value) { return absl::StrFormat("%.10g", value); }

}  // namespace

std::string StatsAsTable(const GetStatsResponse& stats) {
  std::string table = absl::StrFormat("%s (incarnation %016x, protocol %s)\n",
                                      stats.worker_name(), stats.incarnation(), stats.protocol());
  for (const StatsCounter& counter : stats.counters()) {
    if (counter.value() == 0 || absl::EndsWith(counter.name(), "_bucket")) continue;
    absl::StrAppendFormat(&table, "  %-62s %s\n", counter.name() + LabelsOf(counter),
                          Number(counter.value()));
  }
  return table;
}

std::string StatsAsJson(const GetStatsResponse& stats) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(stats, &json, options).ok()) return "{}";
  return json;
}

std::string StatsAsPrometheus(const GetStatsResponse& stats) {
  const std::map<std::string, std::string> worker = {{"worker", stats.worker_name()},
                                                     {"protocol", stats.protocol()}};
  // The format wants each family's lines together, under one TYPE line.
  std::vector<std::string> families;
  std::map<std::string, std::string> lines;
  for (const StatsCounter& counter : stats.counters()) {
    std::string family = counter.name();
    for (absl::string_view suffix : {"_bucket", "_count", "_sum"}) {
      if (absl::StrContains(family, "_latency_seconds") && absl::EndsWith(family, suffix)) {
        family.resize(family.size() - suffix.size());
      }
    }
    auto [line, added] = lines.try_emplace(family);
    if (added) families.push_back(family);
    absl::StrAppend(&line->second, counter.name(), LabelsOf(counter, worker), " ",
                    Number(counter.value()), "\n");
  }
  std::string text;
  for (const std::string& family : families) {
    const char* type = absl::EndsWith(family, "_total")      ? "counter"
                       : absl::EndsWith(family, "_seconds") ? "histogram"
                                                            : "gauge";
    absl::StrAppend(&text, "# TYPE ", family, " ", type, "\n", lines[family]);
  }
  return text;
}

}  // namespace rdv::control
