package Test::Sluice::DNS;

# A small DNS server for resolver tests, in one process: UDP on
# 127.0.0.1:PORT, and TCP on the same port for answers too big or marked
# truncated. Answers come from a file the test rewrites at will, read again
# for every query; one line per record or rule:
#
#   NAME A ADDRESS [TTL]        NAME AAAA ADDRESS [TTL]
#   NAME CNAME TARGET [TTL]     NAME RCODE N      (2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED)
#   NAME SRV PRIORITY WEIGHT PORT TARGET [TTL]
#   NAME TC                     (UDP answers for NAME are truncated: use TCP)
#   NAME SILENT                 (no answer at all: the client times out)
#   NAME DELAY MS               (answer after MS milliseconds)
#
# Records of any type, and hostile replies (for t/hostile_dns.t):
#
#   NAME RR TYPE HEX [TTL]      (a record of type number TYPE with the
#                                rdata HEX, whatever type was asked: an
#                                AAAA inside an A answer, a TXT...)
#   NAME SHORT N                (the reply cut to its first N bytes)
#   NAME WRONGID                (the reply carries another transaction ID)
#   NAME QUESTION OTHER         (the reply's question names OTHER)
#   NAME LOOP                   (each answer's name: a pointer to itself)
#   NAME PASTEND                (each answer's name: a pointer past the end)
#
# A TTL is a decimal number up to 4294967295. A name with no line gets
# NOERROR with no records. Each question is appended to the log file as
# "NAME TYPE PROTO".

use warnings;
use strict;

use IO::Socket::INET;
use IO::Select;

my %TYPE = (A => 1, CNAME => 5, AAAA => 28, SRV => 33);
my %NAME = reverse %TYPE;

sub run {
	my ($port, %opts) = @_;
	my $udp = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Proto => 'udp')
		or die "dns udp $port: $!\n";
	my $tcp = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Proto => 'tcp',
		Listen => 16, ReuseAddr => 1) or die "dns tcp $port: $!\n";
	if ($opts{ready}) {
		open my $fh, '>', $opts{ready} or die "dns: $!\n";
		close $fh;
	}
	my $sel = IO::Select->new($udp, $tcp);
	while (1) {
		for my $s ($sel->can_read(1)) {
			if ($s == $udp) {
				my $from = $udp->recv(my $q, 4096) // next;
				my $r = answer($q, 'udp', %opts);
				$udp->send($r, 0, $from) if defined $r;
			} elsif ($s == $tcp) {
				my $c = $tcp->accept or next;
				my $n = read_n($c, 2) // next;
				my $q = read_n($c, unpack('n', $n)) // next;
				my $r = answer($q, 'tcp', %opts);
				print $c pack('n', length $r) . $r if defined $r;
				close $c;
			}
		}
	}
}

sub read_n {
	my ($c, $n) = @_;
	my $buf = '';
	while (length $buf < $n) {
		my $got = sysread($c, $buf, $n - length $buf, length $buf) or return undef;
	}
	return $buf;
}

sub rules {
	my ($file) = @_;
	my @r;
	open my $fh, '<', $file or return ();
	while (<$fh>) {
		my @f = split;
		push @r, [map { lc } @f[0, 1], @f[2 .. $#f]] if @f >= 2;
	}
	return @r;
}

sub encode_name {
	my ($name) = @_;
	return join('', map { chr(length) . $_ } grep { length } split /\./, $name) . "\0";
}

sub answer {
	my ($q, $proto, %opts) = @_;
	return undef if length $q < 12;
	my ($id, $flags) = unpack('n2', $q);
	# The question: labels, then type and class.
	my ($pos, @labels) = (12);
	while (1) {
		my $len = ord(substr($q, $pos, 1));
		last if $len == 0 || $pos > length $q;
		push @labels, substr($q, $pos + 1, $len);
		$pos += $len + 1;
	}
	my $qname = lc join('.', @labels);
	my ($qtype) = unpack('n', substr($q, $pos + 1, 2));
	my $question = substr($q, 12, $pos + 5 - 12);
	if ($opts{log} && open my $log, '>>', $opts{log}) {
		print $log "$qname " . ($NAME{$qtype} // $qtype) . " $proto\n";
		close $log;
	}
	my @rules = grep { $_->[0] eq $qname } rules($opts{answers});
	return undef if grep { $_->[1] eq 'silent' } @rules;
	if (my ($d) = grep { $_->[1] eq 'delay' } @rules) {
		select(undef, undef, undef, $d->[2] / 1000);
	}
	my $rcode = 0;
	my ($tc, @rr) = (0);
	my %hostile;
	for my $r (@rules) {
		my ($name, $type, $value, $ttl) = @$r;
		$ttl //= 60;
		if ($type eq 'rcode') {
			$rcode = $value;
		} elsif ($type =~ /^(short|wrongid|question|loop|pastend)$/) {
			$hostile{$type} = $value // 1;
		} elsif ($type eq 'rr') {
			push @rr, [$value, $r->[4] // 60, pack('H*', $r->[3])];
		} elsif ($type eq 'tc') {
			$tc = 1 if $proto eq 'udp';
		} elsif ($type eq 'a' && $qtype == 1) {
			push @rr, [1, $ttl, pack('C4', split /\./, $value)];
		} elsif ($type eq 'aaaa' && $qtype == 28) {
			push @rr, [28, $ttl, ipv6($value)];
		} elsif ($type eq 'cname') {
			push @rr, [5, $ttl, encode_name($value)];
		} elsif ($type eq 'srv' && $qtype == 33) {
			my (undef, undef, $prio, $weight, $port, $target, $t) = @$r;
			push @rr, [33, $t // 60, pack('n3', $prio, $weight, $port) . encode_name($target)];
		}
	}
	@rr = () if $tc;
	$id = ($id + 1) & 0xffff if $hostile{wrongid};
	$question = encode_name($hostile{question}) . substr($question, -4) if $hostile{question};
	my $head = pack('n6', $id, 0x8180 | ($tc ? 0x0200 : 0) | $rcode, 1, scalar @rr, 0, 0);
	my $out = $head . $question;
	for my $rr (@rr) {
		# The owner name: a pointer to the question, to itself, or past the end.
		my $ptr = $hostile{loop} ? length $out : $hostile{pastend} ? 0x3fff : 12;
		$out .= pack('n', 0xc000 | $ptr) . pack('nnNn', $rr->[0], 1, $rr->[1], length $rr->[2])
			. $rr->[2];
	}
	$out = substr($out, 0, $hostile{short}) if defined $hostile{short};
	return $out;
}

sub ipv6 {
	my ($text) = @_;
	my ($l, $r) = split /::/, $text, 2;
	my @l = grep { length } split /:/, ($l // '');
	my @r = grep { length } split /:/, ($r // '');
	my @all = (@l, ('0') x (8 - @l - @r), @r);
	return pack('n8', map { hex } @all);
}

1;
