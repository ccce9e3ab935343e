// /metrics in the Prometheus text format, with vLLM's metric names and meanings (counters get
// the _total suffix on the wire, histograms _bucket/_sum/_count), so dashboards and benchmark
// clients written for vLLM read them unchanged. Every series carries model_name.
#pragma once

#include <string>

#include "engine/engine_metrics.h"

namespace fp4::server {

std::string render_metrics(const engine::EngineMetrics& m, const std::string& model_name);

}  // namespace fp4::server
