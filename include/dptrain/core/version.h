// The version the build stamps in (git describe), for the banner and --version.
// Not for: the build's features (backend/device.h: build_features).
#pragma once

#ifndef DPTRAIN_VERSION
#define DPTRAIN_VERSION "0.1.0"
#endif
