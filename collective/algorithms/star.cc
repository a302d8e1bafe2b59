// Star algorithm (parameter-server style, MXNet's reduce-on-one-device): every rank sends its
// buffer to one rank, which reduces them one after another and sends the result back. The star is
// a tree whose root pairs with one rank per level, so it runs on the tree engine (pipelined in
// pieces like the others).
#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {

Status RunStar(Schedule& s, const CallArgs& args) {
  const int root = args.kind == Collective::kAllReduce ? 0 : args.root;
  const Tree star = StarTree(s.nranks(), root);
  switch (args.kind) {
    case Collective::kAllReduce:
      return TreesAllReduce(s, args, {TreeJob{&star, Range{0, args.count}}});
    case Collective::kReduce: return TreeRootedReduce(s, args, star);
    case Collective::kBroadcast: return TreeRootedBroadcast(s, args, star);
    default: return UnsupportedAlgorithm(args);
  }
}

}  // namespace loom::collective::internal
