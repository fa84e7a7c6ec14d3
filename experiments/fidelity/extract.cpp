#include "experiments/fidelity/extract.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/error.h"
#include "sim/h5.h"

namespace mobisim::experiments::fidelity {
namespace {

// A column read as text when it is a string dataset, else as numbers.
struct ColumnData {
  std::vector<std::string> text;
  std::vector<double> num;
  bool is_text = false;
  std::size_t size() const { return is_text ? text.size() : num.size(); }
};

ColumnData read_column(const h5::Reader& r, const std::string& dataset, const std::string& column) {
  std::string group = dataset;
  while (group.size() > 1 && group.ends_with("/")) group.pop_back();
  if (!r.exists(group)) throw InputError(fmt::format("{}: no table '{}'", r.path(), group));
  const std::string path = group + "/" + column;
  if (!r.exists(path)) {
    throw InputError(fmt::format("{}: table '{}' has no column '{}' (columns: {})", r.path(), group, column,
                                 fmt::join(r.children(group), ", ")));
  }
  ColumnData c;
  try {
    c.text = r.strings(path);
    c.is_text = true;
  } catch (const InputError&) {
    c.num = r.doubles(path);
  }
  return c;
}

bool cell_equals(const ColumnData& c, std::size_t row, const std::string& want) {
  if (c.is_text) return c.text[row] == want;
  try {
    std::size_t used = 0;
    const double w = std::stod(want, &used);
    return used == want.size() && std::abs(c.num[row] - w) <= 1e-9 * std::max(1.0, std::abs(w));
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<std::size_t> selected_rows(const h5::Reader& r, const std::string& dataset,
                                       const std::vector<std::pair<std::string, std::string>>& where,
                                       std::size_t n_rows) {
  std::vector<std::size_t> rows(n_rows);
  std::iota(rows.begin(), rows.end(), std::size_t{0});
  for (const auto& condition : where) {
    const std::string& want = condition.second;  // a named reference: clang 14 cannot capture bindings
    const ColumnData c = read_column(r, dataset, condition.first);
    std::erase_if(rows, [&](std::size_t i) { return i >= c.size() || !cell_equals(c, i, want); });
  }
  return rows;
}

std::string where_text(const std::vector<std::pair<std::string, std::string>>& where) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : where) parts.push_back(k + "=" + v);
  return parts.empty() ? std::string("(all rows)") : fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<double> numeric_column(const h5::Reader& r, const std::string& dataset, const std::string& column) {
  const ColumnData c = read_column(r, dataset, column);
  if (c.is_text) throw ConfigError(fmt::format("{}: column '{}' of '{}' is text, not a number", r.path(), column, dataset));
  return c.num;
}

// --- named extractors -------------------------------------------------------------------------

std::string arg_text(const Extract& e, const char* key) {
  const YAML::Node n = e.args[key];
  if (!n.IsDefined() || !n.IsScalar())
    throw ConfigError(fmt::format("extract function '{}': missing text argument '{}'", e.function, key));
  return n.Scalar();
}
std::vector<std::string> arg_list(const Extract& e, const char* key) {
  const YAML::Node n = e.args[key];
  if (!n.IsDefined() || !n.IsSequence() || n.size() == 0)
    throw ConfigError(fmt::format("extract function '{}': argument '{}' must be a non-empty list", e.function, key));
  std::vector<std::string> out;
  for (const auto& v : n) out.push_back(v.as<std::string>());
  return out;
}

// The columns named by `column` (one name, or a list whose values are summed).
std::vector<std::string> column_names(const Extract& e, const char* key) {
  const YAML::Node n = e.args[key];
  if (n.IsDefined() && n.IsSequence() && n.size() > 0) return arg_list(e, key);
  return {arg_text(e, key)};
}

std::string dataset_of(const Extract& e) {
  return e.args["dataset"].IsDefined() ? e.args["dataset"].as<std::string>() : "/summary";
}

// A named extractor's optional `where: {column: value}` row filter.
std::vector<std::pair<std::string, std::string>> function_where(const Extract& e) {
  std::vector<std::pair<std::string, std::string>> where;
  const YAML::Node w = e.args["where"];
  if (w.IsDefined() && w.IsMap())
    for (const auto& kv : w) where.emplace_back(kv.first.as<std::string>(), kv.second.as<std::string>());
  return where;
}

// The one row matching the extractor's `where` plus `extra`.
std::size_t one_row(const h5::Reader& r, const Extract& e, std::vector<std::pair<std::string, std::string>> extra,
                    std::size_t n_rows) {
  const std::string dataset = dataset_of(e);
  for (auto& condition : function_where(e)) extra.push_back(std::move(condition));
  const auto rows = selected_rows(r, dataset, extra, n_rows);
  if (rows.size() != 1)
    throw InputError(fmt::format("{}: {} rows of '{}' match {} (expected one)", r.path(), rows.size(), dataset,
                                 where_text(extra)));
  return rows[0];
}

// Sum of `column`(s) in the row whose `key` column equals `name` (and which matches `where` and `group`).
double keyed(const h5::Reader& r, const Extract& e, const std::string& name,
             const std::vector<std::pair<std::string, std::string>>& group = {}) {
  const std::string dataset = dataset_of(e);
  double sum = 0;
  for (const auto& column : column_names(e, "column")) {
    const auto values = numeric_column(r, dataset, column);
    auto extra = group;
    extra.emplace_back(arg_text(e, "key"), name);
    sum += values[one_row(r, e, extra, values.size())];
  }
  return sum;
}

// A cell as text that selected_rows() matches again (numbers at full precision).
std::string cell_text(const ColumnData& c, std::size_t row) {
  return c.is_text ? c.text[row] : fmt::format("{:.17g}", c.num[row]);
}

// The distinct value combinations of the `group_by` columns among the rows matching `where`, in
// order of first appearance; one empty group when there is no group_by.
std::vector<std::vector<std::pair<std::string, std::string>>> groups_of(const h5::Reader& r, const Extract& e) {
  if (!e.args["group_by"].IsDefined()) return {{}};
  const auto columns = arg_list(e, "group_by");
  const std::string dataset = dataset_of(e);
  std::vector<ColumnData> data;
  for (const auto& c : columns) data.push_back(read_column(r, dataset, c));
  const auto where = function_where(e);
  std::vector<std::vector<std::pair<std::string, std::string>>> groups;
  for (auto row : selected_rows(r, dataset, where, data.front().size())) {
    std::vector<std::pair<std::string, std::string>> g;
    for (std::size_t i = 0; i < columns.size(); ++i) g.emplace_back(columns[i], cell_text(data[i], row));
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(std::move(g));
  }
  if (groups.empty()) throw InputError(fmt::format("{}: no row of '{}' matches {}", r.path(), dataset, where_text(where)));
  return groups;
}

// `ratios`: x[numerator] / x[denominator] inside every group, for every numerator (group-major).
std::vector<double> grouped_ratios(const h5::Reader& r, const Extract& e, double scale) {
  const YAML::Node n = e.args["numerator"];
  const std::vector<std::string> numerators = n.IsDefined() && n.IsSequence() ? arg_list(e, "numerator")
                                                                              : std::vector{arg_text(e, "numerator")};
  const std::string denominator = arg_text(e, "denominator");
  std::vector<double> out;
  for (const auto& g : groups_of(r, e))
    for (const auto& num : numerators) out.push_back(scale * keyed(r, e, num, g) / keyed(r, e, denominator, g));
  return out;
}

// `columns_ratio`: numerator_column(s) / denominator_column(s) in every row matching `where`.
std::vector<double> row_ratios(const h5::Reader& r, const Extract& e, double scale) {
  const std::string dataset = dataset_of(e);
  auto sum_of = [&](const char* key) {
    std::vector<double> total;
    for (const auto& column : column_names(e, key)) {
      const auto values = numeric_column(r, dataset, column);
      if (total.empty()) total.assign(values.size(), 0.0);
      for (std::size_t i = 0; i < values.size() && i < total.size(); ++i) total[i] += values[i];
    }
    return total;
  };
  const auto num = sum_of("numerator_column"), den = sum_of("denominator_column");
  const auto where = function_where(e);
  std::vector<double> out;
  for (auto row : selected_rows(r, dataset, where, std::min(num.size(), den.size())))
    out.push_back(scale * num[row] / den[row]);
  if (out.empty()) throw InputError(fmt::format("{}: no row of '{}' matches {}", r.path(), dataset, where_text(where)));
  return out;
}

std::vector<double> run_function(const h5::Reader& r, const Extract& e) {
  for (const auto& kv : e.args) {
    static const std::vector<std::string> known{"function", "dataset", "column", "key", "where", "numerator",
                                                "denominator", "of", "vs", "rows", "minus", "scale",
                                                "numerator_column", "denominator_column", "group_by", "reduce"};
    const std::string k = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ConfigError(fmt::format("extract function '{}': unknown argument '{}'", e.function, k));
  }
  const double scale = e.args["scale"].IsDefined() ? e.args["scale"].as<double>() : 1.0;
  if (e.function == "ratio") return {scale * keyed(r, e, arg_text(e, "numerator")) / keyed(r, e, arg_text(e, "denominator"))};
  if (e.function == "ratios") return grouped_ratios(r, e, scale);
  if (e.function == "reduction_pct") {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& v : arg_list(e, "vs")) best = std::min(best, keyed(r, e, v));
    return {100.0 * (1.0 - keyed(r, e, arg_text(e, "of")) / best)};
  }
  if (e.function == "difference") return {scale * (keyed(r, e, arg_text(e, "of")) - keyed(r, e, arg_text(e, "minus")))};
  if (e.function == "sum") {
    double s = 0;
    for (const auto& v : arg_list(e, "rows")) s += keyed(r, e, v);
    return {scale * s};
  }
  if (e.function == "share") {
    const auto values = numeric_column(r, dataset_of(e), arg_text(e, "column"));
    double total = 0;
    for (double v : values) total += v;
    return {scale * keyed(r, e, arg_text(e, "of")) / total};
  }
  if (e.function == "columns_ratio") return row_ratios(r, e, scale);
  throw ConfigError(fmt::format("unknown extract function '{}' (known: ratio, ratios, reduction_pct, difference, sum, "
                                "share, columns_ratio)", e.function));
}

}  // namespace

std::vector<double> extract_series(const std::string& h5_path, const Extract& e) {
  const h5::Reader r(h5_path);
  if (!e.function.empty()) return run_function(r, e);
  const auto values = numeric_column(r, e.dataset, e.column);
  auto rows = selected_rows(r, e.dataset, e.where, values.size());
  if (!e.order_by.empty()) {
    const auto key = numeric_column(r, e.dataset, e.order_by);
    std::stable_sort(rows.begin(), rows.end(), [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
  }
  std::vector<double> out;
  for (auto i : rows) out.push_back(values[i]);
  if (out.empty())
    throw InputError(fmt::format("{}: no row of '{}' matches {}", h5_path, e.dataset, where_text(e.where)));
  return out;
}

double extract_value(const std::string& h5_path, const Extract& e) {
  const auto v = extract_series(h5_path, e);
  if (e.reduce.empty() || e.reduce == "first") {
    if (e.reduce.empty() && v.size() != 1)
      throw InputError(e.function.empty()
                           ? fmt::format("{}: {} rows of '{}' match {} (expected one; add where keys or reduce:)",
                                         h5_path, v.size(), e.dataset, where_text(e.where))
                           : fmt::format("{}: extract function '{}' gives {} values (expected one; add reduce:)",
                                         h5_path, e.function, v.size()));
    return v.front();
  }
  if (e.reduce == "last") return v.back();
  if (e.reduce == "min") return *std::min_element(v.begin(), v.end());
  if (e.reduce == "max") return *std::max_element(v.begin(), v.end());
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

bool trend_holds(const std::vector<double>& s, const std::string& trend) {
  if (s.size() < 2) return false;
  const double sign = trend == "increasing" ? 1.0 : -1.0;
  for (std::size_t i = 1; i < s.size(); ++i) {
    const double step = sign * (s[i] - s[i - 1]);
    if (step < -1e-9 * std::max(std::abs(s[i]), std::abs(s[i - 1]))) return false;
  }
  return sign * (s.back() - s.front()) > 0;
}

}  // namespace mobisim::experiments::fidelity
