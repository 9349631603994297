// SPDX-License-Identifier: MIT
pragma solidity 0.8.26;

/// GMX V2 (gmx-synthetics) position layout; the ABI tuple must match theirs field for field.
library Position {
    struct Props {
        Addresses addresses;
        Numbers numbers;
        Flags flags;
    }

    struct Addresses {
        address account;
        address market;
        address collateralToken;
    }

    struct Numbers {
        uint256 sizeInUsd;
        uint256 sizeInTokens;
        uint256 collateralAmount;
        int256 pendingImpactAmount;
        uint256 borrowingFactor;
        uint256 fundingFeeAmountPerSize;
        uint256 longTokenClaimableFundingAmountPerSize;
        uint256 shortTokenClaimableFundingAmountPerSize;
        uint256 increasedAtTime;
        uint256 decreasedAtTime;
    }

    struct Flags {
        bool isLong;
    }
}

/// The read function of the Aave V3 Pool that account dashboards use.
interface IAavePoolAccountData {
    function getUserAccountData(address user)
        external
        view
        returns (
            uint256 totalCollateralBase,
            uint256 totalDebtBase,
            uint256 availableBorrowsBase,
            uint256 currentLiquidationThreshold,
            uint256 ltv,
            uint256 healthFactor
        );
}

/// The read function of the GMX V2 Reader that lists an account's positions.
interface IGmxReaderPositions {
    function getAccountPositions(address dataStore, address account, uint256 start, uint256 end)
        external
        view
        returns (Position.Props[] memory);
}

/// Stand-in for an Aave V3 Pool and a GMX V2 Reader on the devnet, so a client can read a
/// lending position and perpetual positions with the real ABIs. The owner sets the data.
contract DevPositions is IAavePoolAccountData, IGmxReaderPositions {
    struct AccountData {
        uint256 totalCollateralBase;
        uint256 totalDebtBase;
        uint256 liquidationThresholdBps;
        uint256 ltvBps;
    }

    address public immutable owner;
    mapping(address => AccountData) private _accounts;
    mapping(address => Position.Props[]) private _positions;

    constructor() {
        owner = msg.sender;
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "DevPositions: caller is not the owner");
        _;
    }

    /// Amounts in Aave's base currency (USD, 8 decimals); threshold and ltv in basis points.
    function setAccountData(
        address user,
        uint256 totalCollateralBase,
        uint256 totalDebtBase,
        uint256 liquidationThresholdBps,
        uint256 ltvBps
    ) external onlyOwner {
        require(ltvBps <= liquidationThresholdBps && liquidationThresholdBps <= 10_000, "DevPositions: bad bps");
        _accounts[user] = AccountData(totalCollateralBase, totalDebtBase, liquidationThresholdBps, ltvBps);
    }

    function addPosition(Position.Props calldata position) external onlyOwner {
        _positions[position.addresses.account].push(position);
    }

    function clearPositions(address account) external onlyOwner {
        delete _positions[account];
    }

    /// Derives available borrows and health factor the way Aave does (health factor in wad,
    /// max uint256 without debt), so the numbers stay consistent with each other.
    function getUserAccountData(address user)
        external
        view
        returns (
            uint256 totalCollateralBase,
            uint256 totalDebtBase,
            uint256 availableBorrowsBase,
            uint256 currentLiquidationThreshold,
            uint256 ltv,
            uint256 healthFactor
        )
    {
        AccountData storage a = _accounts[user];
        totalCollateralBase = a.totalCollateralBase;
        totalDebtBase = a.totalDebtBase;
        currentLiquidationThreshold = a.liquidationThresholdBps;
        ltv = a.ltvBps;
        uint256 borrowable = totalCollateralBase * ltv / 10_000;
        availableBorrowsBase = borrowable > totalDebtBase ? borrowable - totalDebtBase : 0;
        healthFactor = totalDebtBase == 0
            ? type(uint256).max
            : totalCollateralBase * currentLiquidationThreshold * 1e18 / 10_000 / totalDebtBase;
    }

    /// Positions of `account` in [start, end), `end` clamped to the count as GMX does (where GMX
    /// would underflow on a start past the end, this returns an empty list).
    /// Any dataStore address is accepted: this contract keeps the positions itself.
    function getAccountPositions(address dataStore, address account, uint256 start, uint256 end)
        external
        view
        returns (Position.Props[] memory positions)
    {
        dataStore;
        Position.Props[] storage all = _positions[account];
        if (end > all.length) end = all.length;
        if (start >= end) return new Position.Props[](0);
        positions = new Position.Props[](end - start);
        for (uint256 i = start; i < end; i++) positions[i - start] = all[i];
    }
}
