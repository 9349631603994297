// SPDX-License-Identifier: MIT
pragma solidity 0.8.26;

// Limited, revocable trading permissions on a user's own tokens. The user (owner) keeps the
// funds in their wallet, approves this contract an ERC-20 allowance of one token, and grants a
// delegate (the trading service's signer) the right to swap up to `limit` of that token each
// `period`, until `expiry`, on the routers named, into the tokens named. The chain enforces it:
// the delegate names no recipient (every swap pays the owner), calls no contract but a granted
// router with a swap this contract encodes, and spends no more than the period's amount. The
// owner revokes at any time (or takes the allowance back). Nothing is ever held here between
// transactions: what a swap does not use goes back to the owner in the same transaction.

interface IERC20Min {
    function balanceOf(address account) external view returns (uint256);
}

/// Uniswap V3 SwapRouter02 (IV3SwapRouter): path = token ‖ fee (3 bytes) ‖ token ‖ …
interface IUniswapRouter02 {
    struct ExactInputParams {
        bytes path;
        address recipient;
        uint256 amountIn;
        uint256 amountOutMinimum;
    }

    function exactInput(ExactInputParams calldata params) external payable returns (uint256 amountOut);
}

/// Algebra Integral SwapRouter (Camelot): path = token ‖ deployer (20 bytes) ‖ token ‖ …
interface IAlgebraRouter {
    struct ExactInputParams {
        bytes path;
        address recipient;
        uint256 deadline;
        uint256 amountIn;
        uint256 amountOutMinimum;
    }

    function exactInput(ExactInputParams calldata params) external payable returns (uint256 amountOut);
}

contract TradeGrants {
    uint8 public constant UNISWAP_V3 = 1;
    uint8 public constant ALGEBRA = 2;

    struct Grant {
        address owner;
        address delegate;
        address tokenIn;
        uint128 limit;
        uint128 spent;
        uint64 start;
        uint64 expiry;
        uint64 periodIndex;
        uint32 period;
        bool revoked;
    }

    mapping(bytes32 => Grant) public grants;
    /// the kind of each granted router (UNISWAP_V3 or ALGEBRA); 0: not granted
    mapping(bytes32 => mapping(address => uint8)) public routerKind;
    mapping(bytes32 => mapping(address => bool)) public tokenOutAllowed;
    mapping(address => uint256) public nonces;
    uint256 private unlocked = 1;

    event Granted(
        bytes32 indexed id,
        address indexed owner,
        address indexed delegate,
        address tokenIn,
        uint256 limit,
        uint256 period,
        uint256 expiry,
        address[] routers,
        address[] tokensOut
    );
    event Revoked(bytes32 indexed id, address indexed owner);
    event Swapped(
        bytes32 indexed id,
        address indexed owner,
        address router,
        address tokenIn,
        uint256 amountIn,
        address tokenOut,
        uint256 amountOut,
        uint256 spentInPeriod
    );

    error InvalidGrant(string reason);
    error NoGrant(bytes32 id);
    error NotOwner();
    error NotDelegate();
    error GrantRevoked(bytes32 id);
    error GrantExpired(bytes32 id, uint256 expiry);
    error RouterNotAllowed(address router);
    error TokenNotAllowed(address token);
    error PeriodLimitExceeded(uint256 remaining, uint256 renewsAt);
    error InvalidSwap(string reason);
    error OutputShort(uint256 received, uint256 minOut);
    error TokenCallFailed(address token);
    error Reentered();

    modifier nonReentrant() {
        if (unlocked != 1) revert Reentered();
        unlocked = 2;
        _;
        unlocked = 1;
    }

    /// Grants `delegate` swaps of the caller's `tokenIn`: `limit` each `period` seconds from now,
    /// until `expiry`, on `routers` (each of kind `kinds[i]`), into `tokensOut`.
    function grant(
        address delegate,
        address tokenIn,
        uint128 limit,
        uint32 period,
        uint64 expiry,
        address[] calldata routers,
        uint8[] calldata kinds,
        address[] calldata tokensOut
    ) external returns (bytes32 id) {
        if (delegate == address(0) || tokenIn == address(0)) revert InvalidGrant("zero address");
        if (limit == 0) revert InvalidGrant("limit is 0");
        if (period == 0) revert InvalidGrant("period is 0");
        if (expiry <= block.timestamp) revert InvalidGrant("expiry is not in the future");
        if (routers.length == 0 || routers.length != kinds.length) revert InvalidGrant("routers and kinds");
        if (tokensOut.length == 0) revert InvalidGrant("no token out");
        id = keccak256(abi.encode(block.chainid, address(this), msg.sender, nonces[msg.sender]++));
        grants[id] = Grant({
            owner: msg.sender,
            delegate: delegate,
            tokenIn: tokenIn,
            limit: limit,
            spent: 0,
            start: uint64(block.timestamp),
            expiry: expiry,
            periodIndex: 0,
            period: period,
            revoked: false
        });
        for (uint256 i = 0; i < routers.length; i++) {
            if (kinds[i] != UNISWAP_V3 && kinds[i] != ALGEBRA) revert InvalidGrant("unknown router kind");
            if (routers[i] == address(0)) revert InvalidGrant("zero address");
            routerKind[id][routers[i]] = kinds[i];
        }
        for (uint256 i = 0; i < tokensOut.length; i++) {
            if (tokensOut[i] == tokenIn || tokensOut[i] == address(0)) revert InvalidGrant("token out");
            tokenOutAllowed[id][tokensOut[i]] = true;
        }
        emit Granted(id, msg.sender, delegate, tokenIn, limit, period, expiry, routers, tokensOut);
    }

    /// Ends a grant for good; only its owner can.
    function revoke(bytes32 id) external {
        Grant storage g = grants[id];
        if (g.owner != msg.sender) revert NotOwner();
        g.revoked = true;
        emit Revoked(id, msg.sender);
    }

    /// What the delegate may still spend in the current period, and when the period renews.
    function remaining(bytes32 id) external view returns (uint256 left, uint256 renewsAt) {
        Grant storage g = grants[id];
        if (g.owner == address(0)) revert NoGrant(id);
        uint64 index = uint64((block.timestamp - g.start) / g.period);
        left = g.limit - (index == g.periodIndex ? g.spent : 0);
        renewsAt = uint256(g.start) + (uint256(index) + 1) * g.period;
    }

    /// Swaps `amountIn` of the grant's token along `path` on a granted `router`, paying the owner
    /// at least `minOut` of the path's last token. Only the grant's delegate can.
    function swap(bytes32 id, address router, bytes calldata path, uint256 amountIn, uint256 minOut, uint256 deadline)
        external
        nonReentrant
        returns (uint256 amountOut)
    {
        Leg memory leg = authorize(id, router, path, amountIn, minOut, deadline);
        uint256 unused;
        (amountOut, unused) = exchange(leg, path);
        Grant storage g = grants[id];
        if (unused > 0) g.spent -= uint128(unused);
        emit Swapped(id, leg.owner, router, leg.tokenIn, amountIn - unused, leg.tokenOut, amountOut, g.spent);
    }

    struct Leg {
        address owner;
        address tokenIn;
        address tokenOut;
        address router;
        uint8 kind;
        uint256 amountIn;
        uint256 minOut;
        uint256 deadline;
    }

    /// Checks a swap against its grant and counts it in the period: every refusal is a revert that names why.
    function authorize(bytes32 id, address router, bytes calldata path, uint256 amountIn, uint256 minOut, uint256 deadline)
        private
        returns (Leg memory leg)
    {
        Grant storage g = grants[id];
        if (g.owner == address(0)) revert NoGrant(id);
        if (msg.sender != g.delegate) revert NotDelegate();
        if (g.revoked) revert GrantRevoked(id);
        if (block.timestamp >= g.expiry) revert GrantExpired(id, g.expiry);
        if (block.timestamp > deadline) revert InvalidSwap("deadline passed");
        if (amountIn == 0 || minOut == 0) revert InvalidSwap("amountIn and minOut must be above 0");
        uint8 kind = routerKind[id][router];
        if (kind == 0) revert RouterNotAllowed(router);
        (address first, address last) = endsOf(path, kind == UNISWAP_V3 ? 23 : 40);
        if (first != g.tokenIn) revert TokenNotAllowed(first);
        if (!tokenOutAllowed[id][last]) revert TokenNotAllowed(last);

        uint64 index = uint64((block.timestamp - g.start) / g.period);
        if (index != g.periodIndex) {
            g.periodIndex = index;
            g.spent = 0;
        }
        if (uint256(g.spent) + amountIn > g.limit) {
            revert PeriodLimitExceeded(g.limit - g.spent, uint256(g.start) + (uint256(index) + 1) * g.period);
        }
        g.spent += uint128(amountIn);
        leg = Leg(g.owner, first, last, router, kind, amountIn, minOut, deadline);
    }

    /// Pulls the owner's tokens, swaps them on the router to the owner, and gives back what the
    /// router did not use. Answers what the owner received and what went back unused.
    function exchange(Leg memory leg, bytes calldata path) private returns (uint256 amountOut, uint256 unused) {
        uint256 outBefore = IERC20Min(leg.tokenOut).balanceOf(leg.owner);
        uint256 inBefore = IERC20Min(leg.tokenIn).balanceOf(address(this));
        tokenCall(leg.tokenIn, abi.encodeWithSignature("transferFrom(address,address,uint256)", leg.owner, address(this), leg.amountIn));
        tokenCall(leg.tokenIn, abi.encodeWithSignature("approve(address,uint256)", leg.router, leg.amountIn));
        if (leg.kind == UNISWAP_V3) {
            IUniswapRouter02(leg.router).exactInput(
                IUniswapRouter02.ExactInputParams({
                    path: path,
                    recipient: leg.owner,
                    amountIn: leg.amountIn,
                    amountOutMinimum: leg.minOut
                })
            );
        } else {
            IAlgebraRouter(leg.router).exactInput(
                IAlgebraRouter.ExactInputParams({
                    path: path,
                    recipient: leg.owner,
                    deadline: leg.deadline,
                    amountIn: leg.amountIn,
                    amountOutMinimum: leg.minOut
                })
            );
        }
        tokenCall(leg.tokenIn, abi.encodeWithSignature("approve(address,uint256)", leg.router, 0));
        // a pool short of liquidity may leave part of amountIn unused: it goes back to the owner
        unused = IERC20Min(leg.tokenIn).balanceOf(address(this)) - inBefore;
        if (unused > 0) tokenCall(leg.tokenIn, abi.encodeWithSignature("transfer(address,uint256)", leg.owner, unused));
        amountOut = IERC20Min(leg.tokenOut).balanceOf(leg.owner) - outBefore;
        if (amountOut < leg.minOut) revert OutputShort(amountOut, leg.minOut);
    }

    /// The first and last token of a swap path whose hops are `hop` bytes (20-byte tokens between).
    function endsOf(bytes calldata path, uint256 hop) private pure returns (address first, address last) {
        if (path.length < 20 + hop || (path.length - 20) % hop != 0) revert InvalidSwap("path");
        first = address(bytes20(path[0:20]));
        last = address(bytes20(path[path.length - 20:]));
    }

    /// An ERC-20 call that must succeed (and return true, if it returns anything).
    function tokenCall(address token, bytes memory data) private {
        (bool ok, bytes memory result) = token.call(data);
        if (!ok || (result.length > 0 && !abi.decode(result, (bool)))) revert TokenCallFailed(token);
    }
}
