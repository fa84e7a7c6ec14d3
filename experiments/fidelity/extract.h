#pragma once
// Reading mobisim's value for a point out of an experiment's result file.
//
// Table extractor: `{dataset: /summary, where: {policy: naive}, column: prefill_s}` selects the rows
// of the table (an HDF5 group of columns, sim/h5.h) whose columns equal the `where` values (text
// columns compare as text, numeric columns as numbers) and reads `column`: exactly one row unless
// `reduce` (mean, min, max, first, last) says how to combine several. Trends read every selected
// row (ordered by `order_by` when given).
//
// Named extractors, `{function: NAME, ...}`, for values that are a combination of rows:
//   ratio          {dataset, column, key, numerator: A, denominator: B}         x[A] / x[B]
//   ratios         {dataset, column, key, numerator: A | [A, ...], denominator: B, group_by: [C, ...]}
//                  x_g[A] / x_g[B] inside every group g of rows sharing the group_by columns' values
//                  (in order of first appearance), for every numerator: a series
//   reduction_pct  {dataset, column, key, of: A, vs: [B, C, ...]}              100 (1 - x[A] / min x[vs])
//   difference     {dataset, column, key, of: A, minus: B}                      x[A] - x[B]
//   sum            {dataset, column, key, rows: [A, B]}                         x[A] + x[B]
//   share          {dataset, column, key, of: A}                                x[A] / sum of the column
//   columns_ratio  {dataset, where, numerator_column: C, denominator_column: D} C / D in every selected row
// where x[A] is `column` (a name, or a list of names summed) in the row whose `key` column equals A
// (and which matches the optional `where`); `scale: S` multiplies the result (100 for percent). A function
// giving several values needs `reduce: mean | min | max | first | last` for a numeric point (a trend reads
// them in order).
#include <string>
#include <vector>

#include "experiments/fidelity/registry.h"

namespace mobisim::experiments::fidelity {

// One numeric value (ConfigError on a bad extractor, InputError when the file lacks the table,
// column or row).
double extract_value(const std::string& h5_path, const Extract& e);
// The selected rows' values in order (trends).
std::vector<double> extract_series(const std::string& h5_path, const Extract& e);
// Pass/fail of a trend over a series: every step in the trend's direction or flat (within 1e-9
// relative), and the last value strictly beyond the first.
bool trend_holds(const std::vector<double>& series, const std::string& trend);

}  // namespace mobisim::experiments::fidelity
