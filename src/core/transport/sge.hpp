// Moving message bytes between packets and scatter/gather lists.  Every
// piece is resolved through the MR table at the moment it is used: the key,
// the PD, the access rights and the bounds are checked before a byte moves.
#pragma once

#include <cstdint>
#include <span>

#include "transport/ports.hpp"
#include "uroce/types.hpp"

namespace uroce::transport {

// Copies `data` into the SGE list at byte `offset` of the message.  Needs
// LOCAL_WRITE on every MR touched.  False (nothing more written) if a key,
// PD, access or bound check fails or the list is too short.
bool scatter(const MemoryDomain& mem, std::span<const verbs::Sge> sges, uint32_t offset,
             std::span<const uint8_t> data) noexcept;

// Returns `len` bytes of the message at `offset`: a view of application
// memory when one SGE holds them all, else gathered into `scratch`.  Empty
// span with ok=false if a check fails.
std::span<const uint8_t> gather(const MemoryDomain& mem, std::span<const verbs::Sge> sges, uint32_t offset,
                                uint32_t len, uint8_t* scratch, bool& ok) noexcept;

// Checks every SGE of a list once (key, PD, bounds, `need` access).
bool check_sges(const MemoryDomain& mem, std::span<const verbs::Sge> sges, uint32_t need) noexcept;

}  // namespace uroce::transport
