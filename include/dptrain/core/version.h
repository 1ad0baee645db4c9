// The version the build stamps in (git describe, from the Makefile), for the start-up banner and
// --version. What the build has besides (CUDA, NCCL, BLAS) is the Device factory's to say
// (backend/device.h: build_features).
#pragma once

#ifndef DPTRAIN_VERSION
#define DPTRAIN_VERSION "0.1.0"
#endif
