// Times ToolTable::match over a table of 1,000 tools shaped like real APIs:
// many hosts, exact paths, {param} paths, prefixes, globs and MCP tools.
// Prints ns per match for hits and misses. Usage: bench_match [iterations]
#include "policy/match.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace idemgate::policy;

namespace {

constexpr int tool_count = 1000;
constexpr int host_count = 50;

std::vector<Tool> make_tools() {
  std::vector<Tool> tools;
  for (int i = 0; i < tool_count; ++i) {
    Tool tool;
    tool.name = "tool_" + std::to_string(i);
    const int host = i % host_count;
    const int n = i / host_count;  // 20 tools per host
    tool.match.host = "api" + std::to_string(host) + ".example.com";
    tool.match.method = n % 2 ? "POST" : "GET";
    switch (n % 5) {
      case 0: case 1: tool.match.path = "/v1/resource" + std::to_string(n); break;
      case 2: tool.match.path = "/v1/resource" + std::to_string(n) + "/{id}"; break;
      case 3: tool.match.path = "/v2/area" + std::to_string(n) + "/*"; break;
      case 4: tool.match.path = "/mcp"; tool.match.mcp_tool = "mcp_tool_" + std::to_string(n); break;
    }
    if (i % 97 == 0) tool.match.host = "*.glob" + std::to_string(i) + ".example.com";
    tools.push_back(std::move(tool));
  }
  return tools;
}

struct OwnedRequest {
  std::string method, host, path, mcp;
  MatchRequest view() const { return {method, host, 443, path, "", mcp}; }
};

std::vector<OwnedRequest> make_requests(const std::vector<Tool>& tools, bool hits, std::mt19937& random) {
  std::vector<OwnedRequest> requests;
  for (int i = 0; i < 4096; ++i) {
    const auto& spec = tools[random() % tools.size()].match;
    OwnedRequest r{spec.method.empty() ? "GET" : spec.method, spec.host, spec.path, spec.mcp_tool};
    if (r.host.starts_with("*.")) r.host = "a" + r.host.substr(1);
    if (r.path.ends_with("/*")) r.path.back() = 'x';
    if (const auto brace = r.path.find('{'); brace != std::string::npos) r.path = r.path.substr(0, brace) + "obj_123";
    if (!hits) r.path += "/nope";
    requests.push_back(std::move(r));
  }
  return requests;
}

double time_per_match(const ToolTable& table, const std::vector<OwnedRequest>& requests, long iterations,
                      long& matched) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i)
    matched += table.match(requests[static_cast<std::size_t>(i) % requests.size()].view()) != nullptr;
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(iterations);
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 2'000'000;
  std::mt19937 random(42);
  auto tools = make_tools();
  const auto compile_start = std::chrono::steady_clock::now();
  auto compiled = ToolTable::compile(tools);
  const auto compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - compile_start).count();
  if (!compiled.ties.empty()) {
    std::fprintf(stderr, "unexpected tie: %s\n", compiled.ties.front().message.c_str());
    return 1;
  }
  const auto hits = make_requests(tools, true, random);
  const auto misses = make_requests(tools, false, random);
  long matched_hits = 0, matched_misses = 0;
  const double hit_ns = time_per_match(*compiled.table, hits, iterations, matched_hits);
  const double miss_ns = time_per_match(*compiled.table, misses, iterations, matched_misses);
  std::printf("tools: %d  compile: %.1f ms\n", tool_count, compile_ms);
  std::printf("match (hit):  %.1f ns per match (%ld of %ld matched)\n", hit_ns, matched_hits, iterations);
  std::printf("match (miss): %.1f ns per match (%ld of %ld matched)\n", miss_ns, matched_misses, iterations);
  return matched_hits == iterations ? 0 : 1;
}
