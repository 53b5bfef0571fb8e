// Loading graphs: every error names the node and the field.
#include "graph/graph.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdv::graph {
namespace {

using ::testing::HasSubstr;

constexpr char kCpu0[] = "/job:w/replica:0/task:0/device:CPU:0";

std::string Node(const std::string& name, const std::string& op, const std::string& inputs,
                 const std::string& attrs = "{}", const std::string& device = kCpu0) {
  return "{\"name\": \"" + name + "\", \"op\": \"" + op + "\", \"device\": \"" + device +
         "\", \"input\": [" + inputs + "], \"attr\": " + attrs + "}";
}

std::string Const(const std::string& name, const std::string& device = kCpu0) {
  return Node(name, "Const", "",
              R"({"value": {"tensor": {"dtype": "float", "shape": [2], "floats": [1, 2]}}})",
              device);
}

absl::Status Load(const std::vector<std::string>& nodes) {
  std::string json = "{\"node\": [";
  for (size_t i = 0; i < nodes.size(); ++i) json += (i ? "," : "") + nodes[i];
  return Graph::FromJson(json + "]}").status();
}

TEST(GraphTest, LoadsAndSavesJson) {
  auto graph = Graph::FromJson("{\"node\": [" + Const("a") + "," +
                               Node("b", "Add", "\"a:0\", \"a\"") + "]}");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->num_nodes(), 2);
  EXPECT_EQ(graph->output_type(1, 0), DType::kFloat);
  EXPECT_EQ(graph->topological_order(), (std::vector<int>{0, 1}));
  auto again = Graph::FromJson(graph->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->def().SerializeAsString(), graph->def().SerializeAsString());
}

TEST(GraphTest, ErrorsNameTheNodeAndTheField) {
  const struct {
    std::vector<std::string> nodes;
    const char* message;
  } cases[] = {
      {{Node("x", "Frobnicate", "")}, "node 'x' (Frobnicate): field 'op': unknown op"},
      {{Const("a"), Node("b", "Identity", "\"nope:0\"")}, "node 'b' (Identity): field 'input': 'nope:0' names no node"},
      {{Const("a"), Node("b", "Add", "\"a\"")}, "node 'b' (Add): field 'input': Add takes 2 data inputs, got 1"},
      {{Const("a", "/cpu:0")}, "node 'a' (Const): field 'device'"},
      {{Const("a"), Const("a")}, "node 'a' (Const): the name is used by another node"},
      {{Const("a"), Node("b", "Identity", "\"^a\", \"a\"")}, "data input 'a' after a control input"},
      {{Node("p", "Identity", "\"q\""), Node("q", "Identity", "\"p\"")}, "is on a cycle"},
      {{Const("a"), Node("b", "Identity", "\"a:3\"")}, "'a' has 1 outputs, slot 3 asked for"},
      {{Node("c", "Cast", "")}, "node 'c' (Cast): field 'input'"},
      {{Const("a"), Node("c", "Cast", "\"a\"")}, "node 'c' (Cast): attr 'DstT' is missing"},
      {{Node("k", "Const", "", R"({"value": {"s": "x"}})")}, "node 'k' (Const): attr 'value' is not a tensor"},
  };
  for (const auto& c : cases) {
    const absl::Status status = Load(c.nodes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
  EXPECT_THAT(std::string(Graph::FromJson("{\"node\": [{\"nme\": 1}]}").status().message()),
              HasSubstr("graph JSON does not parse"));
  EXPECT_EQ(Graph::FromJsonFile("/nonexistent.json").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace rdv::graph
