// A transport test's parameter: "ucx", or "ucx:memory=mapped" for the ucx
// plugin with that one setting. Free of gtest: rdv_transport_peer reads it.
#pragma once

#include <string>

#include "plugin/transport.h"

namespace rdv::plugin::conformance {

inline std::string PluginOf(const std::string& parameter) {
  return parameter.substr(0, parameter.find(':'));
}

inline TransportSettings SettingsOf(const std::string& parameter) {
  TransportSettings settings;
  if (const size_t colon = parameter.find(':'); colon != std::string::npos) {
    const size_t equals = parameter.find('=', colon);
    settings[parameter.substr(colon + 1, equals - colon - 1)] = parameter.substr(equals + 1);
  }
  return settings;
}

}  // namespace rdv::plugin::conformance
